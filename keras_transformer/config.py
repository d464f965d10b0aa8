"""`TrainConfig`: every setting of a training run, stored in the run's config.json.

Its model fields are derived from the model's own option lists
(`layers.options.BLOCK_OPTIONS`, `model.MODEL_OPTIONS`) rather than copied, so
every option the model has is a setting here, a key of the config file and a
flag of `keras-transformer train`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from keras_transformer import distribute
from keras_transformer.layers.options import BLOCK_OPTIONS
from keras_transformer.model import MODEL_OPTIONS, STEP_OPTIONS

# The model's sizes, with the TensorFlow tutorial's values.
MODEL_SIZES = {"num_layers": 4, "d_model": 128, "num_heads": 8, "dff": 512}

# Settings whose value must be one of a few names.
CHOICES = {
    "corpus": ("demo", "files", "tsv", "tfds"),
    "overlong": ("truncate", "drop"),
    "jit_compile": ("auto", "true", "false"),
    "mixed_precision": ("none", "float16", "bfloat16"),
    "strategy": distribute.STRATEGIES,
}


@dataclasses.dataclass
class _RunSettings:
    """Data, tokenizer and optimisation settings (the model's are added below)."""

    # Data. corpus: "demo" (built in), "files" (src/tgt), "tsv" or "tfds".
    corpus: str = "demo"
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
    # Tokenizers (one WordPiece vocabulary per language, learned from the training text).
    vocab_size: int = 8000
    vocab_lower_thresh: int = 5
    lower_case: bool = True
    normalization_form: str | None = "NFC"
    # Optimisation.
    epochs: int = 20
    steps_per_epoch: int | None = None
    warmup_steps: int = 4000
    label_smoothing: float = 0.0
    early_stopping_patience: int | None = None
    time_budget_minutes: float | None = None  # stop after the epoch that passes it
    jit_compile: str = "auto"  # "auto", "true" or "false"
    mixed_precision: str = "none"  # "none", "float16" or "bfloat16"
    strategy: str = "default"  # "default", "mirrored", "multi_worker" or "tpu" (distribute.py)
    seed: int = 0

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"Unknown training settings: {unknown}. Known: {sorted(names)}")
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
        if bool(self.val_src) != bool(self.val_tgt):
            raise ValueError("Give both val_src and val_tgt, or neither.")
        positive = ("epochs", "batch_size", "max_tokens", "vocab_size", "warmup_steps")
        for name in positive + tuple(MODEL_SIZES) + ("max_length",):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive. Received: {name}={getattr(self, name)}")

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
        return {"lower_case": self.lower_case, "normalization_form": self.normalization_form}


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


def read_config_file(path: str | os.PathLike) -> dict:
    """Settings from a JSON file: flat TrainConfig fields, or a run directory's config.json."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"Config file {path} is not valid JSON: {error}") from None
    except OSError as error:
        raise ValueError(f"Config file {path} cannot be read: {error.strerror}") from None
    if not isinstance(values, dict):
        raise ValueError(f"Config file {path} must hold a JSON object of settings.")
    if isinstance(values.get("training"), dict):
        values = values["training"]
    return values
