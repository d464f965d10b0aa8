"""The `keras-transformer` commands: their names and helps, and what is read of argv
before the library loads.

A module of its own, outside the keras_transformer package, that imports nothing of
the package: the launcher (keras_transformer_launcher.py) reads it before TensorFlow
loads, to answer `--help` in milliseconds and to choose what must be set before
TensorFlow loads, and the package's parsers (keras_transformer/cli/) take each
command's help from it. Both read it; neither reads the other's table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PROG = "keras-transformer"
DESCRIPTION = "Train, export, translate with and evaluate Transformer translators."
VERBOSE_FLAG = "--verbose"
VERBOSE_HELP = (
    "show TensorFlow's start-up log, and the traceback of an error (default: both hidden)"
)
# Each command and what it does: the help of its parser (keras_transformer/cli/).
COMMANDS = {
    "train": "train a translator (built-in corpus, parallel text files, TSV or tfds)",
    "prepare": "tokenize a corpus once, so that every run from it starts in seconds",
    "demo": "train on the built-in corpus (minutes on a CPU) and show translations",
    "translate": "translate sentences with an exported SavedModel",
    "score": "score given translations with an exported SavedModel",
    "export": "export a training run as a SavedModel for TF Serving",
    "evaluate": "BLEU and chrF of an exported SavedModel on a test set",
    "plot": "figures: positional encoding, learning rate, attention heads, training curves",
    "import": "import a MarianMT, NLLB-200, M2M-100 or mBART-50 checkpoint as a run directory",
    "import-marian": "import a checkpoint as a run directory (the first name of `import`)",
}
# What an export records of itself for readers that load no TensorFlow (the launcher), in
# its version directory: under assets.extra/, which a model server ignores but for the
# warmup requests it may hold.
EXPORT_INFO_FILE = "assets.extra/keras_transformer.json"


def export_compute_dtype(version_dir) -> str:
    """What the export in `version_dir` computes in (its model's compute dtype: "float32",
    "bfloat16"): as its EXPORT_INFO_FILE records, "float32" for exports made before it was
    written. A file that holds no such record is a ValueError naming it."""
    path = Path(version_dir) / EXPORT_INFO_FILE
    if not path.is_file():
        return "float32"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: unreadable export info ({error})") from None
    if not isinstance(info, dict) or not isinstance(info.get("compute_dtype"), str):
        raise ValueError(f"{path}: export info without a compute_dtype string")
    return info["compute_dtype"]


def flags_before_separator(argv: list[str]) -> list[str]:
    """The arguments before `--` (after it, everything is a value)."""
    return argv[: argv.index("--")] if "--" in argv else argv


def command(argv: list[str]) -> str | None:
    """The command named in `argv`: its first argument that is not a flag."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def verbose_requested(argv: list[str]) -> bool:
    """Whether --verbose is among the flags."""
    return VERBOSE_FLAG in flags_before_separator(argv)


def command_list_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The top-level parser and its subparsers, without any command's flags."""
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    parser.add_argument(VERBOSE_FLAG, action="store_true", help=VERBOSE_HELP)
    return parser, parser.add_subparsers(dest="command", required=True)
