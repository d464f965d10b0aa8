"""Draws the figures of docs/notebooks.md into docs/images/, with the library's own plotting.

    python docs/make_figures.py

It trains a small model on the built-in corpus for a few epochs (under a minute on two CPU
cores) in a temporary run directory. Then it draws, with `keras_transformer.plotting`:

- images/positional_encoding.png: the sinusoidal encoding (notebook 01);
- images/training_curves.png: loss and masked accuracy per epoch of that run (notebook 02);
- images/attention.png: the last decoder layer's cross-attention heads while the run's best
  checkpoint translates a held-out sentence (notebook 02).

The figures show what the plots look like; the model is far smaller than the notebooks'.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import matplotlib.pyplot as plt  # noqa: E402

from keras_transformer import demo, plotting, training
from keras_transformer.inference.translator import Translator  # noqa: E402
from keras_transformer.text import corpora
from keras_transformer.training import run_dir  # noqa: E402

IMAGES = Path(__file__).resolve().parent / "images"

# The demo's settings, smaller: a run of about a minute on two CPU cores.
SETTINGS = {
    **demo.DEMO_SETTINGS,
    "demo_pairs": 3000,
    "num_layers": 1,
    "d_model": 64,
    "num_heads": 4,
    "dff": 128,
    "vocab_size": 500,
    "warmup_steps": 200,
    "batch_size": 32,
    "epochs": 6,
}


def main() -> int:
    IMAGES.mkdir(parents=True, exist_ok=True)
    plotting.plot_positional_encoding(
        length=128, depth=128, path=IMAGES / "positional_encoding.png"
    )
    plt.close("all")

    config = training.TrainConfig.from_dict(SETTINGS)
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(scratch) / "run"
        training.train(config, run, verbose=0)
        plotting.plot_training_curves(run, IMAGES / "training_curves.png")

        model, source_tokenizer, target_tokenizer, _ = run_dir.load_run(run)
        translator = Translator(model, source_tokenizer, target_tokenizer)
        _, val_pairs = corpora.load_corpus(config)
        # A held-out sentence of about eight words: long enough to show alignment, short
        # enough for readable labels.
        source, reference = min(val_pairs, key=lambda pair: abs(len(pair[0].split()) - 8))
        plotting.plot_translation_attention(translator, source, path=IMAGES / "attention.png")
        plt.close("all")
        translation = translator([source])["translation"].numpy()[0].decode("utf-8")
    print(f"{source}\n  -> {translation}\n  reference: {reference}")
    for name in ("positional_encoding.png", "training_curves.png", "attention.png"):
        print(IMAGES / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
