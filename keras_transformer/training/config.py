"""`TrainConfig`: every setting of a training run, stored in the run's config.json.

Each setting is a field written out below with its type, its default and its
one-line help (`setting`), grouped by section: the help of its flag
(`cli/settings.py`), of its row in the configuration reference (docs/hooks.py)
and of its entry in the class' `Args`. The model's options take their defaults
and help from the model's own lists (`layers.options.BLOCK_OPTIONS`,
`models.options.MODEL_OPTIONS`), so each is written once; tests/test_config.py checks
that these fields and the model's lists name the same options.

This module holds the settings, how they are read (a dict, a JSON file, a prepared
directory's tokenizer) and what they give the model and the tokenizer
(`model_kwargs`, `tokenizer_kwargs`); the checks of a whole config
(`TrainConfig.validate`) live beside it, in config_checks.py. The settings stay in
one module because each is a field written once with its default and its help, and
those field definitions are most of its length.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import textwrap
from pathlib import Path
from typing import Any

from keras_transformer.layers.options import BLOCK_OPTION_HELP, BLOCK_OPTIONS
from keras_transformer.models.options import MODEL_OPTION_HELP, MODEL_OPTIONS, STEP_OPTIONS
from keras_transformer.text import prepared
from keras_transformer.text.tokenizers.settings import SUBWORD_MODELS
from keras_transformer.training import config_checks, distribute

# The model's sizes: fields of their own, since the model has no defaults for them.
MODEL_SIZES = ("num_layers", "d_model", "num_heads", "dff")


def setting(default: Any, help: str, choices: tuple | None = None) -> Any:
    """A `TrainConfig` field: its default, its help in one line (the help of its flag
    and config key; where the default is None, what unset means) and the values it may
    take, if only a few names."""
    metadata = {"help": help} if choices is None else {"help": help, "choices": tuple(choices)}
    return dataclasses.field(default=default, metadata=metadata)


def model_option(name: str) -> Any:
    """A field for the model's option `name`, with the model's default and help."""
    if name in BLOCK_OPTIONS:
        default, help = BLOCK_OPTIONS[name], BLOCK_OPTION_HELP[name]
    else:
        default, help = MODEL_OPTIONS[name], MODEL_OPTION_HELP[name]
    return dataclasses.field(default=default, metadata={"help": help, "model_option": name})


@dataclasses.dataclass
class TrainConfig:
    """Every setting of a training run; stored in the run directory's config.json.

    The defaults are the TensorFlow tutorial's (TED pt->en: 4 layers, d_model 128,
    dff 512, 8 heads, dropout 0.1, 128 tokens, ~8k vocabularies). The model's
    fields are its sizes (`MODEL_SIZES`) and every option of `Transformer`
    (`BLOCK_OPTIONS` and `MODEL_OPTIONS`), with the model's defaults.
    """

    # -- Data: where the pairs come from, and how they are batched.
    corpus: str = setting(
        "demo",
        "where the pairs come from: demo (built in), files (src and tgt), tsv (tsv), "
        "tfds (tfds_name) or prepared (data)",
        choices=("demo", "files", "tsv", "tfds", "prepared"),
    )
    data: str | None = setting(
        None,
        "a prepared data directory (keras-transformer prepare), read in place of text: "
        "its validation split validates, and the run takes the tokenizer settings it was "
        "prepared with (a tokenizer setting given that differs is refused) (corpus "
        "prepared); unset for the other corpora",
    )
    src: str | None = setting(
        None,
        "training sources, one sentence a line, line-aligned with tgt (corpus files); "
        "unset for the other corpora",
    )
    tgt: str | None = setting(
        None,
        "training targets, one sentence a line, line-aligned with src (corpus files); "
        "unset for the other corpora",
    )
    val_src: str | None = setting(
        None,
        "validation sources, line-aligned with val_tgt; unset: val_tsv, or val_fraction "
        "of the training pairs",
    )
    val_tgt: str | None = setting(
        None, "validation targets, line-aligned with val_src; unset: as for val_src"
    )
    tsv: str | None = setting(
        None,
        "training pairs, one source<TAB>target a line (corpus tsv); unset for the other corpora",
    )
    val_tsv: str | None = setting(
        None,
        "validation pairs, one source<TAB>target a line; unset: val_src and val_tgt, or "
        "val_fraction of the training pairs",
    )
    tfds_name: str = setting(
        "ted_hrlr_translate/pt_to_en",
        "tensorflow-datasets translation corpus (corpus tfds), validated on its validation split",
    )
    demo_pairs: int = setting(20000, "pairs in the built-in corpus (corpus demo)")
    demo_languages: str = setting(
        "en-pt", "source-target num2words languages of the built-in corpus"
    )
    val_fraction: float = setting(
        0.05,
        "share of the training pairs held out for validation when no validation set is given "
        "(prepare, which streams the corpus, holds out each pair with this probability)",
    )
    max_tokens: int = setting(
        128,
        "longest source or target in tokens; longer ones are truncated or dropped (overlong)",
    )
    overlong: str = setting(
        "truncate",
        "what happens to a pair over max_tokens: truncate or drop",
        choices=("truncate", "drop"),
    )
    batch_size: int = setting(64, "pairs per batch")
    batch_tokens: int | None = setting(
        None,
        "token budget per batch instead: a bucket padded to length L gets "
        "batch_tokens // L pairs a batch; unset: batch_size pairs a batch",
    )
    shuffle_buffer: int = setting(20000, "pairs in the shuffle buffer (reshuffled every epoch)")

    # -- Tokenizers, learned from the training text: one per language, or one joint.
    tokenizer: str = setting(
        "sentencepiece",
        "sentencepiece (reversible: translations keep their case, spacing and "
        "punctuation) or wordpiece (the TensorFlow tutorial's: punctuation set off by spaces); "
        "marian: an imported checkpoint's, taken from init_from, never learned; "
        "multilingual: an imported NLLB, M2M-100 or mBART-50 checkpoint's, likewise",
        choices=("sentencepiece", "wordpiece", "marian", "multilingual"),
    )
    shared_vocab: bool = setting(
        False, "one joint vocabulary for source and target, learned from both sides"
    )
    source_language: str | None = setting(
        None,
        "the sources' language code, for a multilingual checkpoint's tokenizer (NLLB-200: "
        "eng_Latn, M2M-100: en, mBART-50: en_XX); unset: none, as other tokenizers take, or "
        "the init_from run's",
    )
    target_language: str | None = setting(
        None,
        "the targets' language code, for a multilingual checkpoint's tokenizer; unset: none, "
        "as other tokenizers take, or the init_from run's",
    )
    subword_model: str = setting(
        "unigram",
        "SentencePiece's algorithm: unigram or bpe (tokenizer sentencepiece)",
        choices=SUBWORD_MODELS,
    )
    subword_alpha: float = setting(
        0.0,
        "subword regularization of the training pairs (tokenizer sentencepiece): "
        "each epoch samples new segmentations, unigram's at this smoothing (in (0, 1]: smaller "
        "is more varied) or BPE's with this dropout of merges; validation and translation take "
        "the best segmentation (0: none)",
    )
    vocab_size: int = setting(
        8000,
        "size of each vocabulary, or of the joint one (a small corpus gives fewer; "
        "SentencePiece needs more than 260)",
    )
    vocab_lower_thresh: int = setting(
        5, "fewest occurrences of a word piece to enter the vocabulary (tokenizer wordpiece)"
    )
    lower_case: bool = setting(False, "lowercase the text before tokenizing")
    normalization_form: str | None = setting(
        "NFC",
        "Unicode normalization before tokenizing (NFC, NFKC, NFD or NFKD); none skips it",
    )

    # -- Where the model starts: new, or from another run (a pretrained import).
    init_from: str | None = setting(
        None,
        "a run directory to start from (an imported checkpoint's, keras-transformer "
        "import-marian, or a trained run's): its model settings, weights and tokenizer files "
        "(copied, never learned) replace this run's; dropout rates stay this run's; unset: "
        "a new model",
    )

    # -- Optimisation: the schedule, regularization, when to stop, how the step runs.
    epochs: int = setting(20, "epochs to train; a resumed run continues up to this many")
    steps_per_epoch: int | None = setting(
        None,
        "training batches per epoch, the data repeating as needed; unset: one "
        "pass over the training pairs",
    )
    warmup_steps: int = setting(
        4000, "steps of rising learning rate before its inverse-square-root decay"
    )
    learning_rate: float | None = setting(
        None,
        "peak learning rate (fairseq's inverse_sqrt schedule); unset: the "
        "paper's schedule, whose peak is (d_model * warmup_steps)^-0.5",
    )
    lr_cooldown: float = setting(
        0.0,
        "share of the run's last steps over which the learning rate falls "
        "linearly to zero, the end projected from epochs and time_budget_minutes as epochs "
        "finish (early stopping is not foreseen) (0: none)",
    )
    weight_decay: float = setting(0.0, "decoupled weight decay (AdamW) when positive")
    clip_norm: float | None = setting(
        None, "clip the gradients' global norm to this value; unset: no clipping"
    )
    label_smoothing: float = setting(0.0, "label smoothing of the loss (0 for none)")
    keep_epoch_checkpoints: int = setting(
        0, "keep the last N epochs' checkpoints, for export --average-last (0: none)"
    )
    early_stopping_patience: int | None = setting(
        None,
        "stop after this many epochs without a better validation loss; unset: never stop early",
    )
    time_budget_minutes: float | None = setting(
        None, "stop after the epoch that passes this many minutes; unset: no limit"
    )
    jit_compile: str = setting(
        "auto",
        "XLA-compile the training step: auto (Keras' choice: on GPU and TPU only), true or false",
        choices=("auto", "true", "false"),
    )
    mixed_precision: str = setting(
        "none",
        "compute dtype: none (float32), float16 or bfloat16",
        choices=("none", "float16", "bfloat16"),
    )
    strategy: str = setting(
        "default",
        "distribution strategy: default, mirrored, multi_worker or tpu",
        choices=distribute.STRATEGIES,
    )
    seed: int = setting(
        0,
        "random seed of the weights, the shuffling, the built-in corpus and the validation split",
    )

    # -- The model's sizes (MODEL_SIZES), with the TensorFlow tutorial's values.
    num_layers: int = setting(4, "blocks in the encoder and in the decoder")
    d_model: int = setting(128, "feature size (even, and divisible by num_heads)")
    num_heads: int = setting(8, "attention heads")
    dff: int = setting(512, "inner size of the feed-forward sublayers")

    # -- The model's options: every block's (layers.options.BLOCK_OPTIONS), then the
    # Transformer's own (models.options.MODEL_OPTIONS); defaults and help are the model's.
    dropout_rate: float = model_option("dropout_rate")
    attention_dropout: float = model_option("attention_dropout")
    activation: str = model_option("activation")
    layer_norm_epsilon: float = model_option("layer_norm_epsilon")
    normalize_first: bool = model_option("normalize_first")
    hashed_dropout: bool = model_option("hashed_dropout")
    chunk_queries: bool = model_option("chunk_queries")
    max_length: int = model_option("max_length")
    tie_embeddings: bool = model_option("tie_embeddings")
    share_embeddings: bool = model_option("share_embeddings")
    skip_padding: bool = model_option("skip_padding")
    decoder_layers: int | None = model_option("decoder_layers")
    embedding_scale: float | None = model_option("embedding_scale")
    position_layout: str = model_option("position_layout")
    position_offset: int = model_option("position_offset")
    embedding_layer_norm: bool = model_option("embedding_layer_norm")
    logits_bias: bool = model_option("logits_bias")
    source_start: bool = model_option("source_start")

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
        """Checks the settings together: choices, ranges, data sources, tokenizer, and
        the model's own checks (config_checks.py); raises ValueError naming the setting."""
        config_checks.validate(self)

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
        if self.tokenizer == "marian":  # its SentencePiece models normalize alone
            return {"kind": self.tokenizer, "shared_vocab": False}
        if self.tokenizer == "multilingual":  # one SentencePiece model, normalizing alone
            return {
                "kind": self.tokenizer,
                "shared_vocab": True,
                "source_language": self.source_language,
                "target_language": self.target_language,
            }
        if self.tokenizer == "sentencepiece":
            settings["subword_model"] = self.subword_model
            settings["vocab_size"] = self.vocab_size
        return settings

    def given_settings(self) -> set[str]:
        """The settings whose values are not their defaults: those a `TrainConfig` made
        in code was given, as far as its values tell."""
        return {
            field.name
            for field in dataclasses.fields(self)
            if getattr(self, field.name) != field.default
        }


# The fields of the tokenizer settings, by their key in `tokenizer_kwargs` (and in a
# prepared directory's index).
TOKENIZER_FIELDS = {key: "tokenizer" if key == "kind" else key for key in prepared.TOKENIZER_KEYS}


def with_prepared_tokenizer(config: TrainConfig, given: set[str]) -> TrainConfig:
    """`config` with the tokenizer settings its prepared data was prepared with.

    A run from prepared data (corpus "prepared") reads token ids: its tokenizer is the
    one the directory holds, whose settings its index records. They replace the
    config's, except those in `given` (the settings a user set: flags, a config file's
    or a dict's keys), which must equal them: one that differs is refused with a
    one-line ValueError naming the directory, the setting and both values. Other
    corpora: `config` unchanged.
    """
    if config.corpus != "prepared" or not config.data:
        return config
    settings = prepared.read_index(config.data)["tokenizer"]
    taken, differing = {}, []
    for key, name in TOKENIZER_FIELDS.items():
        if key not in settings or getattr(config, name) == settings[key]:
            continue  # a WordPiece index has no subword_model or vocab_size
        if name in given:
            differing.append(name)
        taken[name] = settings[key]
    if differing:

        def shown(values):
            return " and ".join(f"{name} {json.dumps(values[name])}" for name in differing)

        ours = {name: getattr(config, name) for name in differing}
        raise ValueError(
            f"{config.data} was prepared with {shown(taken)}, but the run sets {shown(ours)}: "
            "a run from prepared data takes the tokenizer settings it was prepared with, so "
            f"leave {' and '.join(differing)} unset, or prepare the data again."
        )
    return dataclasses.replace(config, **taken)


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


def _args_section() -> str:
    """TrainConfig's Args, from its fields and their help: what `help(TrainConfig)`
    and the API reference show."""
    lines = ["Args:"]
    for field in dataclasses.fields(TrainConfig):
        text = f"{field.name}: {field.metadata['help']}. Defaults to {field.default!r}."
        lines += textwrap.wrap(
            text, 79, initial_indent="    ", subsequent_indent="        ", break_on_hyphens=False
        )
    return "\n".join(lines) + "\n"


TrainConfig.__doc__ = inspect.cleandoc(TrainConfig.__doc__) + "\n\n" + _args_section()


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
