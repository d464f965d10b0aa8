"""The `keras-transformer` command's entry point: what must be set before TensorFlow loads.

It sits outside the keras_transformer package on purpose: importing the
package imports TensorFlow, which writes its C++ start-up lines (oneDNN and
CPU feature notices, GPU probes) to stderr before any code of the package
could quiet them (`--verbose` shows them), and reads its choice of CPU
kernels once, as it loads. `keras-transformer --help` is answered here from
the command table (keras_transformer_commands.py), without importing the
package (seconds of TensorFlow); the package is imported only to run a command.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import tempfile
from pathlib import Path

from keras_transformer_commands import (
    COMMANDS,
    command,
    command_list_parser,
    export_compute_dtype,
    flags_before_separator,
    verbose_requested,
)

# Commands that only decode run small models on TensorFlow's Eigen CPU kernels. Where
# TensorFlow turns its oneDNN kernels on by default (Linux, CPUs with AVX512-VNNI,
# AVX512-BF16 or AMX), those decode slower than Eigen's while they train faster: `train`
# and `demo` keep the default. A model of base size (d_model 512: the base preset,
# OPUS-MT) decodes at least as fast on oneDNN's, whose matrix products by a wide
# vocabulary are faster: an export whose variables take `LARGE_EXPORT_BYTES` or more keeps
# the default too (figures: benchmarks/RESULTS.md, "Figures behind design choices"), and
# so does a bfloat16 export of any size: Eigen's kernels emulate bfloat16 products.
# `plot attention` decodes one sentence, too little to matter. A value the user set is kept.
DECODE_ONLY_COMMANDS = ("translate", "evaluate")
# Commands that only move weights also run on Eigen's kernels: on oneDNN's, TensorFlow's
# allocator keeps every block it frees for the process's life, so each copy a tensor
# passes through stays (building an NLLB-200-600M-shape model alone left 4.1 GB for 2.46 GB
# of weights; the whole import peaks at 5.5 GB on Eigen's: benchmarks/RESULTS.md).
IMPORT_COMMANDS = ("import", "import-marian")
KERNELS_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
LARGE_EXPORT_BYTES = 100 * 10**6


@contextlib.contextmanager
def _stderr_withheld():
    """Sends file descriptor 2 to a temporary file, replayed only if the block raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as withheld:
            os.dup2(withheld.fileno(), 2)
            try:
                yield
            except BaseException:
                os.dup2(saved, 2)
                withheld.seek(0)
                sys.stderr.write(withheld.read().decode("utf-8", errors="replace"))
                raise
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _quiet_tensorflow() -> None:
    """Keeps TensorFlow's C++ log (oneDNN and CPU feature notices, GPU probes) off stderr."""
    # Level 3, not 2: on a machine without a GPU, TensorFlow's probe for one logs an
    # "error" (failed call to cuInit) at the first op. Real failures reach Python as
    # exceptions. A level the user set is kept.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return  # loaded already, or not installed (training from prepared data)
    # Some lines are written while TensorFlow loads, before it reads TF_CPP_MIN_LOG_LEVEL
    # (absl writes every message until it is initialized).
    with _stderr_withheld():
        import tensorflow  # noqa: F401


def _model_flag(argv: list[str]) -> str | None:
    """The value of `--model`, or None."""
    flags = flags_before_separator(argv)
    model = None
    for flag, following in zip(flags, [*flags[1:], None]):  # the last one counts, as in argparse
        if flag == "--model":
            model = following
        elif flag.startswith("--model="):
            model = flag.partition("=")[2]
    return model


def _model_versions(argv: list[str]) -> list[Path]:
    """The directory `--model` names and its integer versions (not an export's staging
    directories); none without `--model`."""
    model = _model_flag(argv)
    if model is None:
        return []
    path = Path(model)
    return [path, *(p for p in path.glob("*") if p.name.isdigit())]


def _export_bytes(argv: list[str]) -> int:
    """The size of the variables of the SavedModel that `--model` names (of its largest
    version, for an export root's model directory); 0 when there is none (the command
    itself then says what is wrong)."""
    return max(
        (
            sum(data.stat().st_size for data in version.glob("variables/variables.data-*"))
            for version in _model_versions(argv)
        ),
        default=0,
    )


def _bfloat16_export(argv: list[str]) -> bool:
    """Whether a version of the SavedModel that `--model` names computes in bfloat16
    (`_model_versions`). An unreadable record counts as not: the command itself then says
    what is wrong."""
    try:
        return any(export_compute_dtype(version) == "bfloat16" for version in _model_versions(argv))
    except ValueError:
        return False


def _choose_kernels(argv: list[str], environ=os.environ) -> None:
    """Eigen kernels for an import, and for a command that only decodes a float32 model
    smaller than base size, unless the user chose."""
    name = command(argv)
    small = (
        name in DECODE_ONLY_COMMANDS
        and _export_bytes(argv) < LARGE_EXPORT_BYTES
        and not _bfloat16_export(argv)
    )
    if small or name in IMPORT_COMMANDS:
        environ.setdefault(KERNELS_VARIABLE, "0")


def main() -> int:
    if command(sys.argv[1:]) is None:
        # `--help`, or no command at all: the list of commands (or the usage error) is
        # answered here, in a few milliseconds, without loading the library.
        parser, subparsers = command_list_parser()
        for name, help_text in COMMANDS.items():
            subparsers.add_parser(name, help=help_text)
        parser.parse_args(sys.argv[1:])  # prints and exits
    if "tensorflow" not in sys.modules:  # read once, as TensorFlow loads
        _choose_kernels(sys.argv[1:])
    if not verbose_requested(sys.argv[1:]):
        _quiet_tensorflow()
    from keras_transformer.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
