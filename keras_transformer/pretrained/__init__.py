"""Published checkpoints imported into the library's own layers, tokenizers and run
directories (docs/pretrained.md): one module a family, chosen by config.json's
`model_type`: MarianMT / OPUS-MT (`marian.py`), M2M-100 and NLLB-200 (`m2m_100.py`),
mBART-50 (`mbart.py`); what they share is `weight_map.py`, `vocabulary.py`,
`imported_run.py` and `multilingual.py`.

`load(DIR)` returns the model and its tokenizers; `import_checkpoint(DIR, RUN)` writes a
run directory that every command takes (`keras-transformer import DIR --run-dir RUN`).
"""

from __future__ import annotations

import os
from pathlib import Path

from keras_transformer.pretrained import m2m_100, mbart
from keras_transformer.pretrained.imported_run import PretrainedModel, import_run
from keras_transformer.pretrained.marian import MarianModel, import_marian, load_marian
from keras_transformer.pretrained.marian_config import CONFIG_FILE, read_json
from keras_transformer.pretrained.safetensors_io import CheckpointError, read_weights

# config.json's model_type -> the family's load function.
FAMILIES = {"marian": load_marian, "m2m_100": m2m_100.load, "mbart": mbart.load}


def load(directory: str | os.PathLike) -> PretrainedModel:
    """A checkpoint directory of any supported family as the library's Transformer and
    tokenizers (`PretrainedModel`); the family is config.json's `model_type`.

    Raises:
        CheckpointError (a ValueError): another model_type, a file missing or
            damaged, weights whose shapes do not match config.json; one line
            naming the file or the setting.
    """
    return FAMILIES[model_type(directory)](directory)


def import_checkpoint(directory: str | os.PathLike, run_dir: str | os.PathLike) -> Path:
    """Writes a checkpoint of any supported family as the run directory `run_dir` (new,
    or empty) and returns its path; a failure leaves nothing behind."""
    return import_run(load, directory, run_dir)


def model_type(directory: str | os.PathLike) -> str:
    """config.json's `model_type`, one of `FAMILIES`."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory (a checkpoint's).")
    config = read_json(directory / CONFIG_FILE, "model settings")
    kind = config.get("model_type") if isinstance(config, dict) else None
    if kind not in FAMILIES:
        raise CheckpointError(
            f"{directory / CONFIG_FILE}: model_type is {kind!r}; supported: "
            f"{', '.join(sorted(FAMILIES))}."
        )
    return kind


__all__ = [
    "FAMILIES",
    "CheckpointError",
    "MarianModel",
    "PretrainedModel",
    "import_checkpoint",
    "import_marian",
    "load",
    "load_marian",
    "model_type",
    "read_weights",
]
