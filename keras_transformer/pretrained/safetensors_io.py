"""A checkpoint's weights by name, as numpy arrays: what the importers read.

transformers' `save_pretrained` writes model.safetensors, read here with the
`safetensors` package's numpy API (no torch). An older checkpoint may hold
pytorch_model.bin instead, a pickle of torch tensors that only torch reads
safely: it is refused, with the one command that converts it. A sharded
checkpoint (model.safetensors.index.json and its parts) is read part by part.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_FILE = "pytorch_model.bin"


class CheckpointError(ValueError):
    """A checkpoint that cannot be imported: the message names the file or setting."""


def read_weights(directory: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint in `directory`, by name, as numpy arrays.

    Raises:
        CheckpointError: no weights file, a pytorch_model.bin only, or a
            file that is not whole (truncated, or not safetensors).
    """
    directory = Path(directory)
    single, index = directory / SAFETENSORS_FILE, directory / SAFETENSORS_INDEX
    if single.is_file():
        return _read_file(single)
    if index.is_file():
        return _read_shards(index)
    if (directory / PYTORCH_FILE).is_file():
        raise CheckpointError(
            f"{directory / PYTORCH_FILE}: PyTorch pickles are not read (only torch reads them "
            "safely); convert it to model.safetensors where torch and transformers are "
            'installed: python -c "from transformers import MarianMTModel as M; '
            f"M.from_pretrained('{directory}').save_pretrained('{directory}')\""
        )
    raise CheckpointError(f"{directory} holds no weights: {SAFETENSORS_FILE} is missing.")


def _read_file(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path} cannot be read as safetensors (truncated or damaged?): {error}"
        ) from None


def _read_shards(index: Path) -> dict[str, np.ndarray]:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        parts = sorted(set(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(f"{index} is not a safetensors index: {error}") from None
    tensors = {}
    for part in parts:
        path = index.parent / part
        if not path.is_file():
            raise CheckpointError(f"{path} is missing (named by {index.name}).")
        tensors.update(_read_file(path))
    return tensors
