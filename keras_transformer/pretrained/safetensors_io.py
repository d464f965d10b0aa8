"""A checkpoint's weights by name, as numpy arrays: what the importers read.

transformers' `save_pretrained` writes model.safetensors, read here with the
`safetensors` package's numpy API (no torch). An older checkpoint may hold
pytorch_model.bin instead, a pickle of torch tensors: torch_pickle.py reads it
without torch, through an unpickler that refuses any global but those that
rebuild tensors (a pickle can run code). Either may be sharded (an index json
naming its parts), and is then read part by part. Where a checkpoint has both,
safetensors is read, as transformers does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from keras_transformer.pretrained.checkpoint_error import CheckpointError
from keras_transformer.pretrained.torch_pickle import read_torch_file

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_FILE = "pytorch_model.bin"
PYTORCH_INDEX = "pytorch_model.bin.index.json"


def read_weights(directory: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint in `directory`, by name, as numpy arrays.

    The first of model.safetensors, model.safetensors.index.json, pytorch_model.bin and
    pytorch_model.bin.index.json found is read. A pytorch_model.bin's arrays are
    read-only, and tensors that shared storage in torch (tied weights) may share memory;
    its bfloat16 tensors become float32, other dtypes stay as saved.

    Raises:
        CheckpointError: no weights file, a file that is not whole (truncated, or not
            safetensors or torch.save's zip archive), a shard the index names missing,
            or a pickle that names any global but those that rebuild tensors.
    """
    directory = Path(directory)
    readers = {
        SAFETENSORS_FILE: _read_file,
        SAFETENSORS_INDEX: lambda index: _read_shards(index, _read_file),
        PYTORCH_FILE: read_torch_file,
        PYTORCH_INDEX: lambda index: _read_shards(index, read_torch_file),
    }
    for name, read in readers.items():
        if (directory / name).is_file():
            return read(directory / name)
    raise CheckpointError(
        f"{directory} holds no weights: neither {SAFETENSORS_FILE} nor {PYTORCH_FILE} "
        "(nor a sharded index of either)."
    )


def _read_file(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path} cannot be read as safetensors (truncated or damaged?): {error}"
        ) from None


def _read_shards(
    index: Path, read: Callable[[Path], dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        parts = sorted(set(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(f"{index} is not a checkpoint index: {error}") from None
    tensors = {}
    for part in parts:
        path = index.parent / part
        if not path.is_file():
            raise CheckpointError(f"{path} is missing (named by {index.name}).")
        tensors.update(read(path))
    return tensors
