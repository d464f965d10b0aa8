"""The run directory: everything a training run leaves behind, in one place.

Layout (written by training, read by export, translate and evaluate):

    RUN_DIR/config.json           {"model": Transformer config, "tokenizer": {...}, "data": {...},
                                   "training": {...}}
    RUN_DIR/vocab_source.txt      source WordPiece vocabulary, one token a line
    RUN_DIR/vocab_target.txt      target WordPiece vocabulary
    RUN_DIR/checkpoints/best.keras   best model by validation loss
    RUN_DIR/checkpoints/last.keras   model at the end of the last epoch
    RUN_DIR/checkpoints/epoch_NNNN.keras   the last epochs, kept for averaging (optional)
    RUN_DIR/backup/               keras.callbacks.BackupAndRestore state (resume after a kill)
    RUN_DIR/logs/                 TensorBoard logs
    RUN_DIR/history.json          per-epoch metrics
    RUN_DIR/training_curves.png   loss and accuracy curves
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keras_transformer import checkpoints
from keras_transformer.tokenizers import Tokenizer

CONFIG_FILE = "config.json"
SOURCE_VOCAB_FILE = "vocab_source.txt"
TARGET_VOCAB_FILE = "vocab_target.txt"
CHECKPOINT_DIR = "checkpoints"
BEST_CHECKPOINT = "checkpoints/best.keras"
LAST_CHECKPOINT = "checkpoints/last.keras"
BACKUP_DIR = "backup"
LOG_DIR = "logs"
HISTORY_FILE = "history.json"
CURVES_FILE = "training_curves.png"


def epoch_checkpoint(run_dir: str | os.PathLike, epoch: int) -> Path:
    """The checkpoint of epoch `epoch` (counted from 1), kept for averaging."""
    return Path(run_dir) / CHECKPOINT_DIR / f"epoch_{epoch:04d}.keras"


def epoch_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The run's kept epoch checkpoints, oldest first."""
    return sorted((Path(run_dir) / CHECKPOINT_DIR).glob("epoch_[0-9]*.keras"))


def write_json_atomically(path: Path, value, **dump_options) -> Path:
    """Writes `value` as JSON under a temporary name, then renames it into place.

    A kill mid-write leaves the old file or the new one, never half of one.
    """
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, **dump_options) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_config(run_dir: str | os.PathLike, config: dict) -> Path:
    path = Path(run_dir) / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_json_atomically(path, config, indent=2, sort_keys=True)


def read_config(run_dir: str | os.PathLike) -> dict:
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory: {path} is missing.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None


def read_history(run_dir: str | os.PathLike) -> list[dict]:
    """history.json: one dict per completed epoch ("epoch" counts from 1)."""
    path = Path(run_dir) / HISTORY_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []


def load_tokenizers(run_dir: str | os.PathLike):
    """The run's (source, target) tokenizers."""
    settings = read_config(run_dir).get("tokenizer", {})
    run_dir = Path(run_dir)
    return (
        Tokenizer(run_dir / SOURCE_VOCAB_FILE, **settings, name="source_tokenizer"),
        Tokenizer(run_dir / TARGET_VOCAB_FILE, **settings, name="target_tokenizer"),
    )


def load_model(
    run_dir: str | os.PathLike, checkpoint: str = BEST_CHECKPOINT, average_last: int | None = None
):
    """The run's Transformer from `checkpoint` (best by validation loss by default), or
    with `average_last=N` the average of its last N epoch checkpoints."""
    if average_last:
        kept = epoch_checkpoints(run_dir)
        if len(kept) < average_last:
            raise ValueError(
                f"Cannot average the last {average_last} epochs: {Path(run_dir) / CHECKPOINT_DIR} "
                f"keeps {len(kept)} epoch checkpoints (train with --keep-epoch-checkpoints N)."
            )
        return checkpoints.average(kept[-average_last:])
    path = Path(run_dir) / checkpoint
    if not path.is_file():
        raise FileNotFoundError(f"No checkpoint at {path}: has the run finished an epoch?")
    return checkpoints.load_model(path)


def load_run(
    run_dir: str | os.PathLike, checkpoint: str = BEST_CHECKPOINT, average_last: int | None = None
):
    """(model, source_tokenizer, target_tokenizer, config) of a finished run."""
    source, target = load_tokenizers(run_dir)
    model = load_model(run_dir, checkpoint, average_last)
    return model, source, target, read_config(run_dir)
