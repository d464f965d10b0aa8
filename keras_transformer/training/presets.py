"""Named sets of training settings: a starting point that flags and config files override.

    keras-transformer train --preset small --src train.en --tgt train.de ...
    TrainConfig.from_dict({**presets.settings("small"), "src": ..., "tgt": ...})

A preset holds only settings that define the recipe (model, tokenizer, optimisation),
never the data, so one preset serves any corpus of its kind.
"""

from __future__ import annotations

PRESETS = {
    # The TensorFlow tutorial "Neural machine translation with a Transformer and Keras":
    # lowercased WordPiece vocabularies of about 8k per language, 4 layers, d_model 128,
    # 8 heads, dff 512, dropout 0.1, no label smoothing, the paper's learning-rate schedule
    # with 4,000 warmup steps, batches of 64 pairs, 128 tokens, 20 epochs.
    "tutorial": {
        "tokenizer": "wordpiece",
        "lower_case": True,
        "shared_vocab": False,
        "vocab_size": 8000,
        "num_layers": 4,
        "d_model": 128,
        "num_heads": 8,
        "dff": 512,
        "dropout_rate": 0.1,
        "attention_dropout": 0.0,
        "label_smoothing": 0.0,
        "share_embeddings": False,
        "tie_embeddings": False,
        "learning_rate": None,
        "warmup_steps": 4000,
        "batch_size": 64,
        "max_tokens": 128,
        "epochs": 20,
    },
    # Small corpora (tens to a few hundred thousand pairs) on a CPU budget of about an
    # hour: fairseq's transformer_tiny sizes (4+4 layers, d_model 128, dff 256, 4 heads)
    # with one joint cased SentencePiece vocabulary whose embedding serves the source, the
    # target and the output projection (a third of the parameters of separate ones, and
    # rare words share what they learn on both sides), label smoothing 0.1, and fairseq's
    # inverse-sqrt schedule for that model, peak 5e-3 after 2,000 warmup steps: validation
    # ranked it above the 3e-3 after 1,000 the preset had before on both corpora (Multi30k,
    # two draws each: beam BLEU 41.43 against 41.12; TED: 33.99 against 33.65). Layer norm
    # comes first in each sublayer (pre-LN): at 3e-3 the paper's post-LN order trained on
    # Multi30k but not on TED pt->en, whose decoder settled into a language model that
    # ignored the source (validation accuracy 0.28 after 4 epochs, 0.32 after 14), while
    # pre-LN reached 0.32 after 2 epochs and 0.62 after 16 (benchmarks/RESULTS.md, "Quality
    # levers"). The learning rate cools to zero over the last fifth of the run: on
    # Multi30k, two runs alike but for that, 13 epochs each, scored validation BLEU 37.58
    # against 36.74 (beam 5). The last 5 epochs are kept for averaging, which validation
    # weighs against the last one. A joint vocabulary of 4,000 trained 40% more target
    # tokens a second than 8,000 (14 epochs against 11 in an hour) but scored lower on
    # validation (beam 36.63 against 37.01).
    "small": {
        "tokenizer": "sentencepiece",
        "subword_model": "unigram",
        "lower_case": False,
        "shared_vocab": True,
        "vocab_size": 8000,
        "num_layers": 4,
        "d_model": 128,
        "num_heads": 4,
        "dff": 256,
        "normalize_first": True,
        "dropout_rate": 0.2,
        "attention_dropout": 0.1,
        "label_smoothing": 0.1,
        "share_embeddings": True,
        "tie_embeddings": True,
        "learning_rate": 5e-3,
        "warmup_steps": 2000,
        "lr_cooldown": 0.2,
        "batch_size": 128,
        "max_tokens": 128,
        "epochs": 150,
        "keep_epoch_checkpoints": 5,
    },
    # Corpora of millions of pairs (WMT), trained on a GPU: the paper's base model (6+6
    # layers, d_model 512, 8 heads, dff 2048, post-LN, dropout 0.1, label smoothing 0.1),
    # one joint SentencePiece vocabulary of 32k whose embedding also serves the target
    # and the output projection (the paper's section 3.4), the paper's inverse-square-root
    # schedule with 4,000 warmup steps, and batches of about 25,000 tokens a side, as the
    # paper's. Prepare the corpus once (`keras-transformer prepare --preset base`), then
    # train from it (`train --preset base --data DIR`), with mixed precision on the GPU.
    "base": {
        "tokenizer": "sentencepiece",
        "subword_model": "unigram",
        "lower_case": False,
        "shared_vocab": True,
        "vocab_size": 32000,
        "num_layers": 6,
        "d_model": 512,
        "num_heads": 8,
        "dff": 2048,
        "normalize_first": False,
        "dropout_rate": 0.1,
        "attention_dropout": 0.0,
        "label_smoothing": 0.1,
        "share_embeddings": True,
        "tie_embeddings": True,
        "learning_rate": None,
        "warmup_steps": 4000,
        "batch_tokens": 25000,
        "max_tokens": 256,
        "epochs": 20,
        "keep_epoch_checkpoints": 5,
    },
    # Fine-tuning a trained model (`--init-from RUN`, an imported OPUS-MT checkpoint's or
    # a trained run's, whose model and tokenizers it takes): a small peak rate after a
    # short warmup, so that the first steps do not undo what the model knows (Adam at the
    # paper's from-scratch peak, about 1e-3, does), inverse-square-root decay after it,
    # label smoothing 0.1 as OPUS-MT's models trained, and early stopping on validation
    # loss, which a small in-domain corpus overfits within a few epochs.
    "finetune": {
        "learning_rate": 5e-5,
        "warmup_steps": 200,
        "label_smoothing": 0.1,
        "early_stopping_patience": 2,
        "epochs": 10,
        "batch_size": 32,
    },
}


def settings(name: str) -> dict:
    """The settings of preset `name` (a copy, to change freely)."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}. Known presets: {sorted(PRESETS)}.")
    return dict(PRESETS[name])
