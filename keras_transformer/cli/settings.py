"""The training settings as flags: one per `TrainConfig` field, with its help, choices and
default, all taken from the field (its metadata: `setting` in config.py)."""

from __future__ import annotations

import argparse
import dataclasses

from keras_transformer.cli.common import optional, parse_bool
from keras_transformer.training import presets
from keras_transformer.training.config import (
    TrainConfig,
    read_config_file,
    with_prepared_tokenizer,
)
from keras_transformer.training.config_checks import TRAINING_DATA_PATHS


def _fit_verbosity(text: str) -> str | int:
    return text if text == "auto" else int(text)


def _setting_type(field: dataclasses.Field):
    """The argparse type of a TrainConfig field; "none" unsets a field that may be None."""
    annotation = field.type if isinstance(field.type, str) else field.type.__name__
    names = [name.strip() for name in annotation.split("|")]
    kind = {"bool": parse_bool, "int": int, "float": float, "str": str}[
        next(name for name in names if name != "None")
    ]
    return optional(kind) if "None" in names else kind


def _shown(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def setting_help(defaults: dict | None = None) -> dict[str, str]:
    """Field name -> help of its flag: the field's own help (its metadata, `setting` in
    config.py) and its default (`defaults` first).

    A field whose default is None describes what unset means instead.
    """

    helps = {}
    for field in dataclasses.fields(TrainConfig):
        default = (defaults or {}).get(field.name, field.default)
        text = field.metadata["help"]
        helps[field.name] = text if default is None else f"{text} (default: {_shown(default)})"
    return helps


def add_config_flags(
    parser: argparse.ArgumentParser,
    defaults: dict | None = None,
    names: tuple[str, ...] | None = None,
) -> None:
    """--config, --preset, --fit-verbose, and one flag per TrainConfig field (--d-model,
    --src, ...), or per field of `names` (and then no --fit-verbose).

    Unset field flags stay None, so that only the flags given override --config.
    """

    parser.add_argument(
        "--config",
        metavar="FILE.json",
        help="JSON file of settings, {setting: value, ...} or a run's config.json, which "
        "the flags below override; unset: the defaults and flags alone",
    )
    parser.add_argument(
        "--preset",
        choices=sorted(presets.PRESETS),
        help="start from a named set of settings, which --config and the flags below "
        "override: small (a joint cased SentencePiece vocabulary, shared embeddings and a "
        "recipe for small corpora), base (the paper's base model, for corpora of millions of "
        "pairs on a GPU) or tutorial (the TensorFlow tutorial's settings); unset: the defaults",
    )
    if names is None:
        parser.add_argument(
            "--fit-verbose",
            type=_fit_verbosity,
            choices=("auto", 0, 1, 2),
            default="auto",
            help="model.fit's display: 0 silent, 1 a progress bar, 2 a line per epoch, auto "
            "Keras' choice (a progress bar) (default: %(default)s)",
        )
    group = parser.add_argument_group(
        "settings",
        "A flag --x-y sets the setting x_y (a key of --config). Booleans take true or "
        "false; `none` unsets a setting that may be unset.",
    )
    helps = setting_help(defaults)
    for field in dataclasses.fields(TrainConfig):
        if names is not None and field.name not in names:
            continue
        kind = _setting_type(field)
        choices = field.metadata.get("choices")
        if kind is parse_bool:
            metavar = "{true,false}"
        else:
            metavar = None if choices else field.name.upper()
        group.add_argument(
            "--" + field.name.replace("_", "-"),
            dest=field.name,
            type=kind,
            choices=choices,
            default=None,
            metavar=metavar,
            help=helps[field.name].replace("%", "%%"),
        )


def config_from_args(args: argparse.Namespace, base: dict | None = None):
    """Defaults < `base` < --preset < --config file < flags given on the command line.

    From prepared data (--data), the tokenizer settings are the directory's: a preset's
    give way to them, and a flag's or the --config file's that differs is refused
    (`with_prepared_tokenizer`).
    """

    values = dict(base or {})
    if getattr(args, "preset", None):
        values.update(presets.settings(args.preset))
    given = set()
    if args.config:
        from_file = read_config_file(args.config)
        values.update(from_file)
        given.update(from_file)
    flags = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(TrainConfig)
        if getattr(args, f.name, None) is not None
    }
    values.update(flags)
    # Data paths given as flags win over a file's or preset's, as every flag does: the
    # other form's paths go, and so does the corpus the file chose unless --corpus is
    # given (`TrainConfig.from_dict` then infers it from the paths).
    for own, other in _DATA_FORMS:
        if flags.keys() & own:
            for name in other:
                values.pop(name, None)
            if own & set(TRAINING_DATA_PATHS) and "corpus" not in flags:
                values.pop("corpus", None)
    return with_prepared_tokenizer(TrainConfig.from_dict(values), given | flags.keys())


# Each pair: the settings of one way to give data, and those of the other way.
_DATA_FORMS = (
    ({"src", "tgt"}, {"tsv", "data"}),
    ({"tsv"}, {"src", "tgt", "data"}),
    ({"data"}, {"src", "tgt", "tsv"}),
    ({"val_src", "val_tgt"}, {"val_tsv"}),
    ({"val_tsv"}, {"val_src", "val_tgt"}),
)


def print_summary(history, run_dir) -> None:
    values = history.history.get("val_masked_accuracy") or [None]
    print(f"Validation masked accuracy after epoch {len(values)}: {values[-1]}")
    print(f"Run directory: {run_dir}")
