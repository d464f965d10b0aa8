"""`TrainConfig`: every setting of a training run, stored in the run's config.json.

Its model fields are derived from the model's own option lists
(`layers.options.BLOCK_OPTIONS`, `model.MODEL_OPTIONS`) rather than copied, so
every option the model has is a setting here, a key of the config file and a
flag of `keras-transformer train`.

One concept, about 430 lines: the settings, their one-line help, their checks
and the docstring built from that help belong together, so that a setting is
written once; most of the length is the help text itself. A typed, nested
config, section by section, is where it would split.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import textwrap
from pathlib import Path

from keras_transformer import distribute
from keras_transformer.constants import RESERVED_TOKENS
from keras_transformer.layers import backend
from keras_transformer.layers.options import BLOCK_OPTION_HELP, BLOCK_OPTIONS
from keras_transformer.model import MODEL_OPTION_HELP, MODEL_OPTIONS, STEP_OPTIONS, Transformer
from keras_transformer.tokenizers.settings import (
    BYTE_PIECES,
    check_normalization_form,
    check_subword_alpha,
)

# The model's sizes, with the TensorFlow tutorial's values.
MODEL_SIZES = {"num_layers": 4, "d_model": 128, "num_heads": 8, "dff": 512}

# The settings that name the training corpus' files.
TRAINING_DATA_PATHS = ("src", "tgt", "tsv", "data")

# Settings whose value must be one of a few names.
CHOICES = {
    "corpus": ("demo", "files", "tsv", "tfds", "prepared"),
    "overlong": ("truncate", "drop"),
    "tokenizer": ("sentencepiece", "wordpiece"),
    "subword_model": ("unigram", "bpe"),
    "jit_compile": ("auto", "true", "false"),
    "mixed_precision": ("none", "float16", "bfloat16"),
    "strategy": distribute.STRATEGIES,
}

# Setting -> what it does, in one line: the help of its flag and config key. The
# model's options are described beside their defaults (BLOCK_OPTION_HELP,
# MODEL_OPTION_HELP). A setting that may be unset (None) says what unset means.
SETTING_HELP = {
    # Data.
    "corpus": "where the pairs come from: demo (built in), files (src and tgt), tsv (tsv), "
    "tfds (tfds_name) or prepared (data)",
    "data": "a prepared data directory (keras-transformer prepare), read in place of text: "
    "its validation split validates, and the tokenizer settings must be the ones it was "
    "prepared with (corpus prepared); unset for the other corpora",
    "src": "training sources, one sentence a line, line-aligned with tgt (corpus files); "
    "unset for the other corpora",
    "tgt": "training targets, one sentence a line, line-aligned with src (corpus files); "
    "unset for the other corpora",
    "val_src": "validation sources, line-aligned with val_tgt; unset: val_tsv, or val_fraction "
    "of the training pairs",
    "val_tgt": "validation targets, line-aligned with val_src; unset: as for val_src",
    "tsv": "training pairs, one source<TAB>target a line (corpus tsv); unset for the other corpora",
    "val_tsv": "validation pairs, one source<TAB>target a line; unset: val_src and val_tgt, or "
    "val_fraction of the training pairs",
    "tfds_name": "tensorflow-datasets translation corpus (corpus tfds), validated on its "
    "validation split",
    "demo_pairs": "pairs in the built-in corpus (corpus demo)",
    "demo_languages": "source-target num2words languages of the built-in corpus",
    "val_fraction": "share of the training pairs held out for validation when no validation "
    "set is given",
    "max_tokens": "longest source or target in tokens; longer ones are truncated or dropped "
    "(overlong)",
    "overlong": "what happens to a pair over max_tokens: truncate or drop",
    "batch_size": "pairs per batch",
    "batch_tokens": "token budget per batch instead: a bucket padded to length L gets "
    "batch_tokens // L pairs a batch; unset: batch_size pairs a batch",
    "shuffle_buffer": "pairs in the shuffle buffer (reshuffled every epoch)",
    # Tokenizers.
    "tokenizer": "sentencepiece (reversible: translations keep their case, spacing and "
    "punctuation) or wordpiece (the TensorFlow tutorial's: punctuation set off by spaces)",
    "shared_vocab": "one joint vocabulary for source and target, learned from both sides",
    "subword_model": "SentencePiece's algorithm: unigram or bpe (tokenizer sentencepiece)",
    "subword_alpha": "subword regularization of the training pairs (tokenizer sentencepiece): "
    "each epoch samples new segmentations, unigram's at this smoothing (in (0, 1]: smaller "
    "is more varied) or BPE's with this dropout of merges; validation and translation take "
    "the best segmentation (0: none)",
    "vocab_size": "size of each vocabulary, or of the joint one (a small corpus gives fewer; "
    "SentencePiece needs more than 260)",
    "vocab_lower_thresh": "fewest occurrences of a word piece to enter the vocabulary "
    "(tokenizer wordpiece)",
    "lower_case": "lowercase the text before tokenizing",
    "normalization_form": "Unicode normalization before tokenizing (NFC, NFKC, NFD or NFKD); "
    "none skips it",
    # Optimisation.
    "epochs": "epochs to train; a resumed run continues up to this many",
    "steps_per_epoch": "training batches per epoch, the data repeating as needed; unset: one "
    "pass over the training pairs",
    "warmup_steps": "steps of rising learning rate before its inverse-square-root decay",
    "learning_rate": "peak learning rate (fairseq's inverse_sqrt schedule); unset: the "
    "paper's schedule, whose peak is (d_model * warmup_steps)^-0.5",
    "lr_cooldown": "share of the run's last steps over which the learning rate falls "
    "linearly to zero, the end projected from epochs and time_budget_minutes as epochs "
    "finish (early stopping is not foreseen) (0: none)",
    "weight_decay": "decoupled weight decay (AdamW) when positive",
    "clip_norm": "clip the gradients' global norm to this value; unset: no clipping",
    "keep_epoch_checkpoints": "keep the last N epochs' checkpoints, for export --average-last "
    "(0: none)",
    "label_smoothing": "label smoothing of the loss (0 for none)",
    "early_stopping_patience": "stop after this many epochs without a better validation loss; "
    "unset: never stop early",
    "time_budget_minutes": "stop after the epoch that passes this many minutes; unset: no limit",
    "jit_compile": "XLA-compile the training step: auto (Keras' choice: on GPU and TPU only), "
    "true or false",
    "mixed_precision": "compute dtype: none (float32), float16 or bfloat16",
    "strategy": "distribution strategy: default, mirrored, multi_worker or tpu",
    "seed": "random seed of the weights, the shuffling, the built-in corpus and the "
    "validation split",
    # The model's sizes.
    "num_layers": "blocks in the encoder and in the decoder",
    "d_model": "feature size (even, and divisible by num_heads)",
    "num_heads": "attention heads",
    "dff": "inner size of the feed-forward sublayers",
}


@dataclasses.dataclass
class _RunSettings:
    """Data, tokenizer and optimisation settings (the model's are added below)."""

    # Data. corpus: "demo" (built in), "files" (src/tgt), "tsv", "tfds" or "prepared" (data).
    corpus: str = "demo"
    data: str | None = None
    src: str | None = None
    tgt: str | None = None
    val_src: str | None = None
    val_tgt: str | None = None
    tsv: str | None = None
    val_tsv: str | None = None
    tfds_name: str = "ted_hrlr_translate/pt_to_en"
    demo_pairs: int = 20000
    demo_languages: str = "en-pt"
    val_fraction: float = 0.05  # held out when no validation set is given
    max_tokens: int = 128
    overlong: str = "truncate"
    batch_size: int = 64
    batch_tokens: int | None = None
    shuffle_buffer: int = 20000
    # Tokenizers, learned from the training text: one per language, or one joint
    # (shared_vocab). tokenizer: "sentencepiece" (reversible, cased) or "wordpiece".
    tokenizer: str = "sentencepiece"
    shared_vocab: bool = False
    subword_model: str = "unigram"  # "unigram" or "bpe" (SentencePiece only)
    subword_alpha: float = 0.0  # sampled segmentations in training (SentencePiece only)
    vocab_size: int = 8000
    vocab_lower_thresh: int = 5  # WordPiece only
    lower_case: bool = False
    normalization_form: str | None = "NFC"
    # Optimisation.
    epochs: int = 20
    steps_per_epoch: int | None = None
    warmup_steps: int = 4000
    learning_rate: float | None = None
    lr_cooldown: float = 0.0
    weight_decay: float = 0.0
    clip_norm: float | None = None
    label_smoothing: float = 0.0
    keep_epoch_checkpoints: int = 0
    early_stopping_patience: int | None = None
    time_budget_minutes: float | None = None  # stop after the epoch that passes it
    jit_compile: str = "auto"  # "auto", "true" or "false"
    mixed_precision: str = "none"  # "none", "float16" or "bfloat16"
    strategy: str = "default"  # "default", "mirrored", "multi_worker" or "tpu" (distribute.py)
    seed: int = 0

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        """Settings from `values`; without a corpus, the data paths given choose it
        (src and tgt: files, tsv: tsv, data: prepared), and none the built-in demo corpus."""
        _check_known(values)
        if "corpus" not in values:
            if values.get("src") or values.get("tgt"):
                values = {**values, "corpus": "files"}
            elif values.get("tsv"):
                values = {**values, "corpus": "tsv"}
            elif values.get("data"):
                values = {**values, "corpus": "prepared"}
        for field in dataclasses.fields(cls):
            if field.name in values:
                _check_type(field, values[field.name])
        return cls(**values)

    @classmethod
    def from_file(cls, path: str | os.PathLike, **overrides) -> TrainConfig:
        """Settings from a JSON file, then `overrides`."""
        return cls.from_dict({**read_config_file(path), **overrides})

    def validate(self) -> None:
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"{name} must be one of {allowed}. Received: {getattr(self, name)!r}"
                )
        if self.corpus == "files" and not (self.src and self.tgt):
            raise ValueError("corpus='files' needs both src and tgt (--src FILE --tgt FILE).")
        if self.corpus == "tsv" and not self.tsv:
            raise ValueError("corpus='tsv' needs tsv (--tsv FILE).")
        if self.corpus == "prepared" and not self.data:
            raise ValueError("corpus='prepared' needs data (--data PREPARED_DIR).")
        if bool(self.val_src) != bool(self.val_tgt):
            raise ValueError("Give both val_src and val_tgt, or neither.")
        positive = ("epochs", "batch_size", "max_tokens", "vocab_size", "warmup_steps")
        for name in positive + tuple(MODEL_SIZES) + ("max_length",):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive. Received: {name}={getattr(self, name)}")
        self._validate_ranges()
        self._validate_data_sources()
        self._validate_tokenizer_settings()
        if self.share_embeddings and not self.shared_vocab:
            raise ValueError(
                "share_embeddings=True needs one vocabulary for source and target: set "
                "shared_vocab=True too (--shared-vocab true)."
            )
        if self.max_tokens > self.max_length:
            raise ValueError(
                f"max_tokens={self.max_tokens} exceeds max_length={self.max_length}, the "
                "longest sequence the model's positions cover: lower max_tokens or raise "
                "max_length."
            )
        if self.lr_cooldown and self.time_budget_minutes and not backend.ON_TENSORFLOW:
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
            **self.model_kwargs(self.vocab_size, self.vocab_size),
            **self.step_kwargs(),
            name="settings_check",
        )

    def _validate_ranges(self) -> None:
        """Numbers whose meaning ends outside a range; unset (None) is always allowed."""
        ranges = {
            # name: (lowest, highest, whether the lowest itself is allowed)
            "lr_cooldown": (0, 1, True),
            "label_smoothing": (0, 1, True),
            "val_fraction": (0, 1, False),
            "learning_rate": (0, math.inf, False),
            "weight_decay": (0, math.inf, True),
            "clip_norm": (0, math.inf, False),
            "time_budget_minutes": (0, math.inf, False),
        }
        for name, (low, high, low_allowed) in ranges.items():
            value = getattr(self, name)
            if value is None:
                continue
            above_low = value >= low if low_allowed else value > low
            if not (above_low and value < high):
                interval = f"{'[' if low_allowed else '('}{low}, {high})"
                raise ValueError(f"{name} must be in {interval}. Received: {name}={value}")
        for name in ("batch_tokens", "steps_per_epoch", "shuffle_buffer", "demo_pairs"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive. Received: {name}={value}")
        for name in ("keep_epoch_checkpoints", "early_stopping_patience"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be 0 or more. Received: {name}={value}")

    def _validate_data_sources(self) -> None:
        """Every data path given is one the chosen corpus reads: a path it would ignore
        is a mistake (such as --src with a config file whose corpus is tsv)."""
        used = {"files": {"src", "tgt"}, "tsv": {"tsv"}, "prepared": {"data"}}.get(
            self.corpus, set()
        )
        given = [name for name in TRAINING_DATA_PATHS if getattr(self, name)]
        ignored = [name for name in given if name not in used]
        if ignored:
            raise ValueError(
                f"corpus={self.corpus!r} does not read {', '.join(ignored)}: set corpus to "
                "'files' (src and tgt), 'tsv' (tsv) or 'prepared' (data), or leave them unset."
            )
        if self.val_tsv and self.val_src:
            raise ValueError("Give val_src and val_tgt, or val_tsv, not both.")
        if self.corpus == "prepared" and (self.val_src or self.val_tsv):
            raise ValueError(
                "corpus='prepared' validates on the prepared directory's validation split: "
                "leave val_src, val_tgt and val_tsv unset (give them to prepare)."
            )
        if self.corpus == "prepared" and self.subword_alpha:
            raise ValueError(
                "subword_alpha samples new segmentations of the text every epoch, and prepared "
                "data holds fixed ids: train from text files for it, or set subword_alpha=0."
            )
        if self.corpus == "tfds" and (self.val_src or self.val_tsv):
            raise ValueError(
                "corpus='tfds' validates on the corpus' own validation split: leave val_src, "
                "val_tgt and val_tsv unset."
            )

    def _validate_tokenizer_settings(self) -> None:
        if self.normalization_form is not None:
            check_normalization_form(self.normalization_form)
        smallest = len(RESERVED_TOKENS) + BYTE_PIECES + 1
        if self.tokenizer == "sentencepiece" and self.vocab_size < smallest:
            raise ValueError(
                f"vocab_size must be at least {smallest} with tokenizer='sentencepiece' (its "
                f"{len(RESERVED_TOKENS)} reserved and {BYTE_PIECES} byte pieces come first). "
                f"Received: vocab_size={self.vocab_size}; raise it, or use tokenizer='wordpiece'."
            )
        check_subword_alpha(self.subword_alpha)
        if self.subword_alpha and self.strategy == "multi_worker":
            # Workers shard one stream of batches (distribute.shard_by_data), which they
            # must build alike; each would draw its own segmentations.
            raise ValueError(
                "subword_alpha cannot be used with strategy='multi_worker': each worker "
                "would sample different batches. Use subword_alpha=0 there."
            )
        if self.subword_alpha and self.tokenizer != "sentencepiece":
            raise ValueError(
                "subword_alpha samples segmentations, which only tokenizer='sentencepiece' can "
                f"do. Received: tokenizer={self.tokenizer!r}, subword_alpha={self.subword_alpha}"
            )

    def model_kwargs(self, input_vocab_size: int, target_vocab_size: int) -> dict:
        """The Transformer's constructor arguments that define the model (config.json's
        "model"); the step options (`STEP_OPTIONS`) are left out, so that a run may resume
        with them switched."""
        names = [*MODEL_SIZES, *BLOCK_OPTIONS, *MODEL_OPTIONS]
        return {
            "input_vocab_size": input_vocab_size,
            "target_vocab_size": target_vocab_size,
            **{name: getattr(self, name) for name in names if name not in STEP_OPTIONS},
        }

    def step_kwargs(self) -> dict:
        """The Transformer's options that change how its step computes, not what."""
        return {name: getattr(self, name) for name in STEP_OPTIONS}

    def tokenizer_kwargs(self) -> dict:
        """The tokenizer settings (config.json's "tokenizer"), from which
        `run_dir.load_tokenizers` rebuilds the run's tokenizers; a resumed run must
        have the same."""
        settings = {
            "kind": self.tokenizer,
            "shared_vocab": self.shared_vocab,
            "lower_case": self.lower_case,
            "normalization_form": self.normalization_form,
        }
        if self.tokenizer == "sentencepiece":
            settings["subword_model"] = self.subword_model
            settings["vocab_size"] = self.vocab_size
        return settings


def _check_known(values: dict, source: str = "") -> None:
    """Every key of `values` is a setting; the error names `source` (" in FILE") if given."""
    names = sorted(f.name for f in dataclasses.fields(TrainConfig))
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ValueError(f"Unknown training settings: {unknown}{source}. Known: {names}")


_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "None": type(None)}


def _check_type(field: dataclasses.Field, value) -> None:
    """A setting's value must be of its field's type (an int will do for a float)."""
    annotation = field.type if isinstance(field.type, str) else field.type.__name__
    allowed = tuple(_TYPES[name.strip()] for name in annotation.split("|"))
    # bool is an int subclass: True is no number of epochs.
    fits = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
    if float in allowed and isinstance(value, int) and not isinstance(value, bool):
        fits = True
    if not fits:
        raise ValueError(
            f"Setting {field.name} must be of type {annotation}. Received: {field.name}={value!r}"
        )


def _model_fields() -> list[tuple]:
    defaults = {**MODEL_SIZES, **BLOCK_OPTIONS, **MODEL_OPTIONS}
    return [
        (name, type(default), dataclasses.field(default=default))
        for name, default in defaults.items()
    ]


TrainConfig = dataclasses.make_dataclass("TrainConfig", _model_fields(), bases=(_RunSettings,))
TrainConfig.__module__ = __name__
TrainConfig.__doc__ = """Every setting of a training run; stored in the run directory's config.json.

The defaults are the TensorFlow tutorial's (TED pt->en: 4 layers, d_model 128,
dff 512, 8 heads, dropout 0.1, 128 tokens, ~8k vocabularies). The model's
fields are its sizes (`MODEL_SIZES`) and every option of `Transformer`
(`BLOCK_OPTIONS` and `MODEL_OPTIONS`), with the model's defaults.
"""


def _args_section() -> str:
    """TrainConfig's Args, from its fields and their help (`SETTING_HELP` and the
    model's option helps): what `help(TrainConfig)` and the API reference show."""
    helps = {**SETTING_HELP, **BLOCK_OPTION_HELP, **MODEL_OPTION_HELP}
    lines = ["Args:"]
    for field in dataclasses.fields(TrainConfig):
        text = f"{field.name}: {helps[field.name]}. Defaults to {field.default!r}."
        lines += textwrap.wrap(
            text, 79, initial_indent="    ", subsequent_indent="        ", break_on_hyphens=False
        )
    return "\n".join(lines) + "\n"


TrainConfig.__doc__ += "\n" + _args_section()


def read_config_file(path: str | os.PathLike) -> dict:
    """Settings from a JSON file: flat TrainConfig fields, or a run directory's config.json."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as error:  # JSONDecodeError, or UnicodeDecodeError for non-UTF-8 bytes
        raise ValueError(f"Config file {path} is not valid JSON: {error}") from None
    except OSError as error:
        raise ValueError(f"Config file {path} cannot be read: {error.strerror}") from None
    if not isinstance(values, dict):
        raise ValueError(f"Config file {path} must hold a JSON object of settings.")
    if isinstance(values.get("training"), dict):
        values = values["training"]
    _check_known(values, f" in config file {path}")
    return values
