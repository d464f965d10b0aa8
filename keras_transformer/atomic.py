"""Files written whole or not at all: under a temporary name, then renamed into place.

A training run is killed at any moment on shared machines. Every file it
writes (checkpoints, backups, history, config, tokenizers) goes through
`write_atomically`, so a kill mid-write leaves the old file or the new one,
never half of one under the real name. The temporary name keeps the real
name's ending (`.keras`, `.weights.h5`, `.png`), which the writers choose
their format by.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

PARTIAL_PREFIX = ".partial."


def partial_path(path: str | os.PathLike) -> Path:
    """Where `path` is written before it is renamed into place."""
    path = Path(path)
    return path.with_name(PARTIAL_PREFIX + path.name)


def write_atomically(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Calls `write(temporary_path)`, then renames the temporary file to `path`.

    If `write` raises, `path` is left as it was and the temporary file removed.
    """
    path = Path(path)
    partial = partial_path(path)
    try:
        write(partial)
        # On disk before the rename, and the rename itself after: a kill needs
        # neither, but a crash of the machine would otherwise leave an empty
        # file under the real name.
        _sync(partial)
        os.replace(partial, path)
        _sync(path.parent)
    finally:
        partial.unlink(missing_ok=True)
    return path


def _sync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_partial_files(*directories: str | os.PathLike) -> list[Path]:
    """Deletes what killed writers left in `directories`; returns the deleted paths."""
    removed = []
    for directory in directories:
        for path in Path(directory).glob(PARTIAL_PREFIX + "*"):
            if path.is_file():
                path.unlink()
                removed.append(path)
    return removed
