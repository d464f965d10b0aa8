"""What every subcommand shares: user errors, flag types, the --verbose flag."""

from __future__ import annotations

import argparse

# The command's name, its commands and its --verbose flag, read before TensorFlow loads
# (keras_transformer_commands.py, outside the package).
from keras_transformer_commands import COMMANDS, PROG, VERBOSE_FLAG, VERBOSE_HELP  # noqa: F401

MODEL_HELP = "the exported SavedModel: EXPORT_ROOT/NAME (its latest version) or EXPORT_ROOT/NAME/N"
BEAM_HELP = "beam search of width N (default: greedy search)"


class UserError(Exception):
    """A mistake in the command line, reported in one line without a traceback."""


# What a user's mistake raises: the library raises ValueError for invalid settings,
# OSError (FileNotFoundError, PermissionError, ...) for files it cannot use, and
# ImportError, naming the package, for work this machine lacks a package for (text
# training where TensorFlow is not installed).
USER_ERRORS = (UserError, ValueError, OSError, ImportError)


def parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def optional(kind):
    def parse(text: str):
        return None if text.lower() in ("none", "null", "") else kind(text)

    parse.__name__ = kind.__name__
    return parse


def require_positive(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be positive, got {value}")


def add_search_flags(parser: argparse.ArgumentParser) -> None:
    """--beam and --batch-size, for the commands that translate with an export."""
    parser.add_argument("--beam", type=int, default=None, metavar="N", help=BEAM_HELP)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="sentences per call of the model (default: %(default)s)",
    )


def add_language_flags(parser: argparse.ArgumentParser, what: str) -> None:
    """--source-language and --target-language: a multilingual checkpoint's codes."""
    for side in ("source", "target"):
        parser.add_argument(
            f"--{side}-language",
            default=None,
            metavar="CODE",
            help=f"the {side} language of {what} for a multilingual model (NLLB-200: "
            "eng_Latn, M2M-100: en, mBART-50: en_XX; default: none, as a single-pair "
            "model needs)",
        )


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a subcommand that was not given --verbose leaves the top-level one alone.
    parser.add_argument(
        VERBOSE_FLAG, action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
    )
