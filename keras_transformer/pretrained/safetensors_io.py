"""A checkpoint's weights by name, as numpy arrays: what the importers read.

transformers' `save_pretrained` writes model.safetensors, read here with the
`safetensors` package's numpy API (no torch). An older checkpoint may hold
pytorch_model.bin instead, a pickle of torch tensors: torch_pickle.py reads it
without torch, through an unpickler that refuses any global but those that
rebuild tensors (a pickle can run code). Either may be sharded (an index json
naming its parts). Where a checkpoint has both, safetensors is read, as
transformers does.

`open_weights` reads only the files' headers (names, shapes, and for a pickle every
check of its structure) and each tensor when it is asked for, so that an import holds one
tensor at a time beside the model it fills: a 600M checkpoint's import needs about the
model's memory and its largest tensor's, not the whole checkpoint's twice.
`read_weights` reads every tensor at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from keras_transformer.pretrained.checkpoint_error import CheckpointError
from keras_transformer.pretrained.torch_pickle import TorchFile

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_FILE = "pytorch_model.bin"
PYTORCH_INDEX = "pytorch_model.bin.index.json"
# safetensors' dtypes, as numpy reads them (little-endian, as the format stores them).
SAFETENSORS_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "BF16": "<u2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}


def read_weights(directory: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint in `directory`, by name, as numpy arrays.

    A pytorch_model.bin's arrays are read-only, and tensors that shared storage in torch
    (tied weights) share memory; its bfloat16 tensors become float32, other dtypes stay
    as saved.

    Raises:
        CheckpointError: as `open_weights`.
    """
    with open_weights(directory) as weights:
        return weights.read_all()


def open_weights(directory: str | os.PathLike) -> CheckpointWeights:
    """The checkpoint in `directory`, open: a mapping of its tensors' names to their values,
    each read from its file when looked up (and not kept). Close it (or use it in a `with`).

    The first of model.safetensors, model.safetensors.index.json, pytorch_model.bin and
    pytorch_model.bin.index.json found is read.

    Raises:
        CheckpointError: no weights file, a file that is not whole (truncated, or not
            safetensors or torch.save's zip archive), a shard the index names missing,
            or a pickle that names any global but those that rebuild tensors; on opening,
            or for a storage damaged within, when its tensor is read.
    """
    directory = Path(directory)
    parts = {
        SAFETENSORS_FILE: lambda path: [_SafetensorsFile(path)],
        SAFETENSORS_INDEX: lambda index: _shards(index, _SafetensorsFile),
        PYTORCH_FILE: lambda path: [TorchFile(path)],
        PYTORCH_INDEX: lambda index: _shards(index, TorchFile),
    }
    for name, open_parts in parts.items():
        if (directory / name).is_file():
            return CheckpointWeights(open_parts(directory / name))
    raise CheckpointError(
        f"{directory} holds no weights: neither {SAFETENSORS_FILE} nor {PYTORCH_FILE} "
        "(nor a sharded index of either)."
    )


class CheckpointWeights(Mapping):
    """A checkpoint's tensors by name, over its open files (`open_weights`)."""

    def __init__(self, parts: list):
        self._parts = parts
        self._where = {name: part for part in parts for name in part.shapes}

    def __getitem__(self, name: str) -> np.ndarray:
        return self._where[name].read(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def shape(self, name: str) -> tuple:
        """Tensor `name`'s shape, without reading it."""
        return tuple(self._where[name].shapes[name])

    def read_all(self) -> dict[str, np.ndarray]:
        """Every tensor; a pickle's tensors that share a storage share its memory."""
        storages = {}
        return {name: part.read(name, storages) for name, part in self._where.items()}

    def close(self) -> None:
        for part in self._parts:
            part.close()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()


class _SafetensorsFile:
    """One safetensors file: its shapes by name, and each tensor read when asked for.

    The `safetensors` package checks the file whole (its header, every tensor's bytes
    within the file) when it opens; the tensors are then read with plain file reads at
    the offsets its header gives, since the package maps the file and the pages it reads
    stay in the process's memory while the file is open: a 1 GB table would take 2 GB
    as it is read. bfloat16 tensors become float32 (numpy has no bfloat16).
    """

    def __init__(self, path: Path):
        from safetensors import SafetensorError, safe_open

        self.path = path
        try:
            with safe_open(path, framework="numpy") as file:
                names = list(file.keys())
            with open(path, "rb") as file:
                header_size = int.from_bytes(file.read(8), "little")
                header = json.loads(file.read(header_size))
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(
                f"{path} cannot be read as safetensors (truncated or damaged?): {error}"
            ) from None
        self._start = 8 + header_size  # where the tensors' bytes begin
        self._entries = {name: header[name] for name in names}
        self.shapes = {name: tuple(entry["shape"]) for name, entry in self._entries.items()}

    def read(self, name: str, storages=None) -> np.ndarray:
        """Tensor `name` (`storages` is for pickles, whose tensors may share one)."""
        entry = self._entries[name]
        kind = entry["dtype"]
        if kind not in SAFETENSORS_DTYPES:
            raise CheckpointError(f"{self.path}: {name} has dtype {kind}, which is not read.")
        dtype = np.dtype(SAFETENSORS_DTYPES[kind])
        begin, _ = entry["data_offsets"]
        count = int(np.prod(entry["shape"], dtype=np.int64))
        try:
            values = np.fromfile(self.path, dtype, count, offset=self._start + begin)
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{self.path}: {name} cannot be read: {error}") from None
        if kind == "BF16":  # float32's upper half
            bits = values.astype(np.uint32)
            bits <<= 16
            values = bits.view(np.float32)
        return values.reshape(entry["shape"])

    def close(self) -> None:
        pass  # nothing stays open


def _shards(index: Path, open_part) -> list:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        names = sorted(set(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(f"{index} is not a checkpoint index: {error}") from None
    parts = []
    try:
        for name in names:
            path = index.parent / name
            if not path.is_file():
                raise CheckpointError(f"{path} is missing (named by {index.name}).")
            parts.append(open_part(path))
    except BaseException:
        for part in parts:
            part.close()
        raise
    return parts
