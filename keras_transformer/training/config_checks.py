"""The checks of a whole `TrainConfig` (config.py), run by `TrainConfig.validate`.

A field's type is checked as it is read (`TrainConfig.from_dict`); these check
the values: a choice among a field's `choices`, numbers in their ranges, the
data paths the corpus reads, the tokenizer's settings, and the model's own
checks, run by constructing a model before any run directory is written.
Apart from config.py so that the settings read as one list there. `config` is
the `TrainConfig` being validated, read by name: this module does not import
config.py, which imports it.
"""

from __future__ import annotations

import dataclasses
import math

from keras_transformer.constants import RESERVED_TOKENS
from keras_transformer.layers import backend
from keras_transformer.models.transformer import Transformer
from keras_transformer.text.tokenizers.settings import (
    BYTE_PIECES,
    check_normalization_form,
    check_subword_alpha,
)

# The settings that name the training corpus' files.
TRAINING_DATA_PATHS = ("src", "tgt", "tsv", "data")

# Settings that must be positive, and those that may also be unset (None).
POSITIVE = (
    *("epochs", "batch_size", "max_tokens", "vocab_size", "warmup_steps"),
    *("num_layers", "d_model", "num_heads", "dff", "max_length"),
)
POSITIVE_OR_UNSET = ("batch_tokens", "steps_per_epoch", "shuffle_buffer", "demo_pairs")

# Numbers whose meaning ends outside a range; unset (None) is always allowed.
# name: (lowest, highest, whether the lowest itself is allowed)
RANGES = {
    "lr_cooldown": (0, 1, True),
    "label_smoothing": (0, 1, True),
    "val_fraction": (0, 1, False),
    "learning_rate": (0, math.inf, False),
    "weight_decay": (0, math.inf, True),
    "clip_norm": (0, math.inf, False),
    "time_budget_minutes": (0, math.inf, False),
}


def validate(config) -> None:
    """Raises ValueError, naming the setting and its value, for settings that cannot
    train together."""
    for field in dataclasses.fields(config):
        allowed = field.metadata.get("choices")
        value = getattr(config, field.name)
        if allowed is not None and value not in allowed:
            raise ValueError(f"{field.name} must be one of {allowed}. Received: {value!r}")
    if config.corpus == "files" and not (config.src and config.tgt):
        raise ValueError("corpus='files' needs both src and tgt (--src FILE --tgt FILE).")
    if config.corpus == "tsv" and not config.tsv:
        raise ValueError("corpus='tsv' needs tsv (--tsv FILE).")
    if config.corpus == "prepared" and not config.data:
        raise ValueError("corpus='prepared' needs data (--data PREPARED_DIR).")
    if bool(config.val_src) != bool(config.val_tgt):
        raise ValueError("Give both val_src and val_tgt, or neither.")
    for name in POSITIVE:
        if getattr(config, name) <= 0:
            raise ValueError(f"{name} must be positive. Received: {name}={getattr(config, name)}")
    _check_ranges(config)
    _check_data_sources(config)
    _check_tokenizer_settings(config)
    # An imported Marian checkpoint's joint vocabulary has a SentencePiece model a side (two
    # tokenizer files, one id space): the model checks that the sizes agree.
    if config.share_embeddings and not config.shared_vocab and config.tokenizer != "marian":
        raise ValueError(
            "share_embeddings=True needs one vocabulary for source and target: set "
            "shared_vocab=True too (--shared-vocab true)."
        )
    if config.max_tokens > config.max_length:
        raise ValueError(
            f"max_tokens={config.max_tokens} exceeds max_length={config.max_length}, the "
            "longest sequence the model's positions cover: lower max_tokens or raise "
            "max_length."
        )
    if config.lr_cooldown and config.time_budget_minutes and not backend.ON_TENSORFLOW:
        # JAX and PyTorch compile the schedule's end as it is at the first step: a
        # run bounded by epochs knows it then, one bounded by time does not.
        raise ValueError(
            "lr_cooldown with time_budget_minutes runs on the TensorFlow backend only "
            f"(the Keras backend here is {backend.BACKEND!r}): bound the run by epochs "
            "alone, or KERAS_BACKEND=tensorflow."
        )
    # The model's own checks (head size, dropout rates, activation, ...), run by
    # constructing one, which makes no weights: before a run directory is written,
    # not after, when it would hold settings that no model can take.
    Transformer(
        **config.model_kwargs(config.vocab_size, config.vocab_size),
        **config.step_kwargs(),
        name="settings_check",
    )


def _check_ranges(config) -> None:
    for name, (low, high, low_allowed) in RANGES.items():
        value = getattr(config, name)
        if value is None:
            continue
        above_low = value >= low if low_allowed else value > low
        if not (above_low and value < high):
            interval = f"{'[' if low_allowed else '('}{low}, {high})"
            raise ValueError(f"{name} must be in {interval}. Received: {name}={value}")
    for name in POSITIVE_OR_UNSET:
        value = getattr(config, name)
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive. Received: {name}={value}")
    for name in ("keep_epoch_checkpoints", "early_stopping_patience"):
        value = getattr(config, name)
        if value is not None and value < 0:
            raise ValueError(f"{name} must be 0 or more. Received: {name}={value}")


def _check_data_sources(config) -> None:
    """Every data path given is one the chosen corpus reads: a path it would ignore
    is a mistake (such as --src with a config file whose corpus is tsv)."""
    used = {"files": {"src", "tgt"}, "tsv": {"tsv"}, "prepared": {"data"}}.get(config.corpus, set())
    given = [name for name in TRAINING_DATA_PATHS if getattr(config, name)]
    ignored = [name for name in given if name not in used]
    if ignored:
        raise ValueError(
            f"corpus={config.corpus!r} does not read {', '.join(ignored)}: set corpus to "
            "'files' (src and tgt), 'tsv' (tsv) or 'prepared' (data), or leave them unset."
        )
    if config.val_tsv and config.val_src:
        raise ValueError("Give val_src and val_tgt, or val_tsv, not both.")
    if config.corpus == "prepared" and (config.val_src or config.val_tsv):
        raise ValueError(
            "corpus='prepared' validates on the prepared directory's validation split: "
            "leave val_src, val_tgt and val_tsv unset (give them to prepare)."
        )
    if config.corpus == "prepared" and config.subword_alpha:
        raise ValueError(
            "subword_alpha samples new segmentations of the text every epoch, and prepared "
            "data holds fixed ids: train from text files for it, or set subword_alpha=0."
        )
    if config.corpus == "tfds" and (config.val_src or config.val_tsv):
        raise ValueError(
            "corpus='tfds' validates on the corpus' own validation split: leave val_src, "
            "val_tgt and val_tsv unset."
        )


def _check_tokenizer_settings(config) -> None:
    if config.normalization_form is not None:
        check_normalization_form(config.normalization_form)
    smallest = len(RESERVED_TOKENS) + BYTE_PIECES + 1
    if config.tokenizer == "sentencepiece" and config.vocab_size < smallest:
        raise ValueError(
            f"vocab_size must be at least {smallest} with tokenizer='sentencepiece' (its "
            f"{len(RESERVED_TOKENS)} reserved and {BYTE_PIECES} byte pieces come first). "
            f"Received: vocab_size={config.vocab_size}; raise it, or use tokenizer='wordpiece'."
        )
    check_subword_alpha(config.subword_alpha)
    if config.subword_alpha and config.strategy == "multi_worker":
        # Workers shard one stream of batches (distribute.shard_by_data), which they
        # must build alike; each would draw its own segmentations.
        raise ValueError(
            "subword_alpha cannot be used with strategy='multi_worker': each worker "
            "would sample different batches. Use subword_alpha=0 there."
        )
    _check_languages(config)
    if config.tokenizer in ("marian", "multilingual") and not config.init_from:
        raise ValueError(
            f"tokenizer={config.tokenizer!r} is an imported checkpoint's, never learned: give "
            "init_from (--init-from RUN, a run directory that keras-transformer import wrote)."
        )
    if config.subword_alpha and config.tokenizer != "sentencepiece":
        raise ValueError(
            "subword_alpha samples segmentations, which only tokenizer='sentencepiece' can "
            f"do. Received: tokenizer={config.tokenizer!r}, subword_alpha={config.subword_alpha}"
        )


def _check_languages(config) -> None:
    """Languages go with a multilingual checkpoint's tokenizer, both or neither."""
    given = [name for name in ("source_language", "target_language") if getattr(config, name)]
    if given and config.tokenizer != "multilingual":
        raise ValueError(
            f"{' and '.join(given)} name a multilingual checkpoint's languages; "
            f"tokenizer={config.tokenizer!r} takes none."
        )
    if len(given) == 1:
        missing = "target_language" if given == ["source_language"] else "source_language"
        raise ValueError(f"Give {missing} too (--{missing.replace('_', '-')} CODE).")
