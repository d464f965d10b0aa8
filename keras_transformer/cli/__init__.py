"""`keras-transformer train | prepare | demo | translate | score | export | evaluate | plot |
import` (and `import-marian`, its first name).

A thin command line.

Each subcommand (one module each: `train`, `prepare`, `demo`, `translate`, `score`,
`export`, `evaluate`, `plot`, `import_checkpoint`; the flags they share in `settings` and
`common`) only parses flags, calls library functions and
prints. `train` alone runs where TensorFlow is not installed (from prepared data,
on JAX or PyTorch); there the others say in one line that they need it. A user error (a file that
is missing or unreadable, an invalid setting, a bad number) ends the command
with one line, `keras-transformer: error: ...`, and exit status 2; any other
exception is a bug and shows its traceback. The console script enters through
`keras_transformer_launcher`, which keeps TensorFlow's start-up log quiet and
chooses TensorFlow's CPU kernels for the commands that only decode.
"""

from __future__ import annotations

import argparse
import sys
import traceback
import warnings

from keras_transformer.cli import train
from keras_transformer.cli.common import COMMANDS, PROG, USER_ERRORS, UserError
from keras_transformer.cli.settings import config_from_args, setting_help
from keras_transformer_commands import command, command_list_parser, verbose_requested

try:  # every command but `train` tokenizes, decodes or exports: TensorFlow's work
    from keras_transformer.cli import (
        demo,
        evaluate,
        export,
        import_checkpoint,
        plot,
        prepare,
        score,
        translate,
    )
except ImportError as missing:
    if missing.name not in ("tensorflow", "tensorflow_text"):
        raise
    demo = evaluate = export = import_checkpoint = plot = prepare = score = translate = None

# The commands that need TensorFlow: all but `train`.
TENSORFLOW_COMMANDS = tuple(name for name in COMMANDS if name != "train")

__all__ = ["UserError", "build_parser", "config_from_args", "main", "setting_help"]


def build_parser() -> argparse.ArgumentParser:
    parser, subparsers = command_list_parser()
    # Each subcommand registers itself here: add_<name>_parser(subparsers).
    train.add_train_parser(subparsers)
    if translate is None:
        for name in TENSORFLOW_COMMANDS:
            _add_stand_in(subparsers, name)
        return parser
    prepare.add_prepare_parser(subparsers)
    demo.add_demo_parser(subparsers)
    translate.add_translate_parser(subparsers)
    score.add_score_parser(subparsers)
    export.add_export_parser(subparsers)
    evaluate.add_evaluate_parser(subparsers)
    plot.add_plot_parser(subparsers)
    import_checkpoint.add_import_parser(subparsers)
    return parser


def _add_stand_in(subparsers, name: str) -> None:
    """A command that needs TensorFlow, where it is not installed: listed, refused by `main`."""
    subparsers.add_parser(name, help=f"{COMMANDS[name]} (needs TensorFlow)")


def _needs_tensorflow(name: str) -> str:
    return (
        f"`{PROG} {name}` needs TensorFlow and tensorflow-text, which are not installed "
        f"here; without them `{PROG} train --data DIR` trains from prepared data."
    )


def _one_line(error: BaseException) -> str:
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        message = f"{error.filename}: {error.strerror}"
    else:
        message = str(error) or type(error).__name__
    return " ".join(message.split())


def _warning_line(message, category, *_) -> str:
    """A warning as the command line shows it: one line, without the code that raised it."""
    return f"{PROG}: warning: {' '.join(str(message).split())}\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = verbose_requested(argv)
    parser = build_parser()
    name = command(argv)
    if translate is None and name in TENSORFLOW_COMMANDS:
        parser.exit(2, f"{parser.prog}: error: {_needs_tensorflow(name)}\n")
    args = parser.parse_args(argv)
    shown_as, warnings.formatwarning = warnings.formatwarning, _warning_line
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as error:
        if verbose:
            traceback.print_exc()
        parser.exit(2, f"{parser.prog}: error: {_one_line(error)}\n")
    finally:
        warnings.formatwarning = shown_as


if __name__ == "__main__":
    sys.exit(main())
