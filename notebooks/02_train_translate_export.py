# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Train, translate, evaluate, export
#
# The whole life of a translator with `keras_transformer`, on the built-in corpus (numbers
# written as words, English -> Portuguese): train it, translate with greedy and beam search,
# look at its cross-attention, score it with BLEU and chrF on held-out pairs, export it as a
# SavedModel for TF Serving, and translate again with the reloaded export.
#
# Everything is written under `KT_NOTEBOOK_WORKDIR` (default `../runs/notebooks`). With
# `KT_NOTEBOOK_QUICK=1` (the test suite sets it) the model is tiny and trains for a minute:
# it runs every step but translates badly. Without it, the `keras-transformer demo` settings
# (`demo.DEMO_SETTINGS`) train for a few minutes on a CPU and translate well.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
from IPython.display import Image, display

from keras_transformer import demo, evaluation, plotting, training
from keras_transformer.demo import target_normalized
from keras_transformer.inference import export, loaded_export
from keras_transformer.inference.translator import Translator
from keras_transformer.text import corpora
from keras_transformer.training import run_dir

QUICK = os.environ.get("KT_NOTEBOOK_QUICK") == "1"
WORKDIR = Path(os.environ.get("KT_NOTEBOOK_WORKDIR", "../runs/notebooks")).resolve()
WORKDIR.mkdir(parents=True, exist_ok=True)

settings = dict(demo.DEMO_SETTINGS)
if QUICK:
    # A tiny run: every step works, the translations are poor.
    settings.update(
        demo_pairs=400, num_layers=1, d_model=32, num_heads=2, dff=64, epochs=2,
        vocab_size=300, vocab_lower_thresh=1, warmup_steps=50, batch_size=32,
    )  # fmt: skip
config = training.TrainConfig.from_dict(settings)
RUN_DIR = WORKDIR / ("demo_quick" if QUICK else "demo")
print(f"quick={QUICK}, run directory {RUN_DIR}\n{config}")

# %% [markdown]
# ## Train
# `train` fills the run directory: config, vocabularies, best and last checkpoints, history
# and the training curves. Running this cell again resumes the run (nothing left to do once
# all epochs are done).

# %%
history = training.train(config, RUN_DIR, verbose=2)
entries = run_dir.read_history(RUN_DIR)
assert [e["epoch"] for e in entries] == list(range(1, config.epochs + 1))
assert all(np.isfinite(e["val_loss"]) for e in entries)
# Training lowers the loss: the last epoch ends below the first.
assert entries[-1]["loss"] < entries[0]["loss"], entries
display(Image(filename=str(RUN_DIR / run_dir.CURVES_FILE)))

# %% [markdown]
# ## Translate
# `Translator` holds the model and both tokenizers: strings in, strings out. Greedy search
# takes the most likely token at each step; beam search keeps the `beam_width` best
# prefixes and ranks finished ones with the GNMT length penalty.

# %%
model, source_tokenizer, target_tokenizer, _ = run_dir.load_run(RUN_DIR)
translator = Translator(model, source_tokenizer, target_tokenizer, beam_width=4)
_, val_pairs = corpora.load_corpus(config)
examples = val_pairs[:5]
sources = corpora.texts(examples, 0)


def strings(outputs):
    return [t.decode("utf-8") for t in outputs["translation"].numpy()]


greedy_outputs = translator(sources)
greedy = strings(greedy_outputs)
beam = strings(translator(sources, method="beam"))
for (src, ref), g, b in zip(examples, greedy, beam, strict=True):
    print(f"{src}\n  greedy: {g}\n  beam:   {b}\n  ref:    {target_normalized(ref)}")

# %% [markdown]
# The score of a translation is its log-probability under the model: one teacher-forced
# pass over the decoded tokens gives the same number.

# %%
tokens = greedy_outputs["tokens"].numpy()
lengths = greedy_outputs["lengths"].numpy()
start = np.full((len(tokens), 1), 2)  # [START]
logits = model((greedy_outputs["context_ids"], np.concatenate([start, tokens[:, :-1]], 1)))
log_probs = tf.nn.log_softmax(logits).numpy()
picked = np.take_along_axis(log_probs, tokens[..., None], -1)[..., 0]
picked[np.arange(tokens.shape[1]) >= lengths[:, None]] = 0.0
print("scores:", greedy_outputs["score"].numpy(), "\nrecomputed:", picked.sum(1))
np.testing.assert_allclose(picked.sum(1), greedy_outputs["score"].numpy(), rtol=1e-4, atol=1e-3)

# %% [markdown]
# ## Cross-attention
# Which source tokens each head of the last decoder layer looks at while producing each
# target token (row `i` is the step that wrote target token `i`).

# %%
found = plotting.translation_attention(translator, sources[0])
heads, target_length, source_length = found["attention"].shape
assert (heads, source_length) == (config.num_heads, len(found["source_tokens"]))
# Each row is a softmax over the source: it sums to one.
np.testing.assert_allclose(found["attention"].sum(-1), 1.0, atol=1e-5)
plotting.plot_translation_attention(translator, sources[0])
plt.show()

# %% [markdown]
# ## Evaluate
# BLEU and chrF (sacrebleu) on held-out pairs. The demo's SentencePiece translator writes
# cased text with its punctuation as it is, after the tokenizer's normalization (Unicode
# normal form, single spaces); the references get the same normalization
# (`target_normalized`, which also sets punctuation apart for a WordPiece run) and are
# scored with `tokenize="none"`, so that both sides are compared as written.

# %%
test_pairs = val_pairs[: 48 if QUICK else 500]
references = [target_normalized(t) for t in corpora.texts(test_pairs, 1)]


def translate_batch(batch):
    return strings(translator(batch))


result = evaluation.evaluate(
    translate_batch,
    corpora.texts(test_pairs, 0),
    references,
    tokenize="none",
    output_dir=WORKDIR / "evaluation",
    progress=False,
)
print(evaluation.summary_line(result))
written = Path(result["translations_file"]).read_text(encoding="utf-8").splitlines()
assert len(written) == len(test_pairs)
# The scores are those of the translations written to the file.
assert evaluation.score(written, references, tokenize="none")["bleu"] == result["bleu"]
if not QUICK:
    assert result["bleu"] > 50, "the demo settings should translate numbers well"

# %% [markdown]
# ## Export for TF Serving
# `export_run` writes the best checkpoint with its tokenizers and decoding loops as
# `saved_models/demo/<version>/` (`demo_quick` in quick mode): TF Serving serves it as is.

# %%
export_root = WORKDIR / "saved_models"
export_dir = export.export_run(RUN_DIR, export_root, name=RUN_DIR.name)
print(export_dir, sorted(p.name for p in export_dir.iterdir()))
assert (export_dir / "saved_model.pb").is_file() and export_dir.name.isdigit()

# %% [markdown]
# ## Translate with the reloaded export
# The SavedModel needs TensorFlow and tensorflow-text only (see notebook 03). It gives the
# same translations as the `Translator` it was exported from.

# %%
saved_model = loaded_export.load_translator(export_dir.parent)
reloaded = loaded_export.translate_texts(saved_model, sources)
reloaded_beam = loaded_export.translate_texts(saved_model, sources, beam_width=4)
for src, (text, score) in zip(sources, reloaded, strict=True):
    print(f"{score:8.3f}  {src} -> {text}")
assert [text for text, _ in reloaded] == greedy
assert [text for text, _ in reloaded_beam] == beam
