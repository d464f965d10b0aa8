"""The `keras-transformer` command's entry point: TensorFlow's start-up log kept quiet.

It sits outside the keras_transformer package on purpose: importing the
package imports TensorFlow, which writes its C++ start-up lines (oneDNN and
CPU feature notices, GPU probes) to stderr before any code of the package
could quiet them. `--verbose` shows them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile

VERBOSE_FLAG = "--verbose"


def _verbose_requested(argv: list[str]) -> bool:
    """Whether --verbose is among the flags (read before the library is imported)."""
    flags = argv[: argv.index("--")] if "--" in argv else argv
    return VERBOSE_FLAG in flags


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
    if "tensorflow" in sys.modules:
        return
    # Some lines are written while TensorFlow loads, before it reads TF_CPP_MIN_LOG_LEVEL
    # (absl writes every message until it is initialized).
    with _stderr_withheld():
        import tensorflow  # noqa: F401


def main() -> int:
    if not _verbose_requested(sys.argv[1:]):
        _quiet_tensorflow()
    from keras_transformer.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
