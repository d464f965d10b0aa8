"""The run's backup: the state a killed run resumes from.

After every epoch N, `RunBackup` writes the model's weights and optimizer
state to `backup/epoch_NNNN.weights.h5`, whole or not at all, before
history.json records the epoch (`RunHistory` runs last and writes it). So
history.json is the one record of the epochs done, and every epoch it records
has its state on disk; a kill between the two writes only leaves an epoch
that was never recorded, which the resume trains again. The state of the
epoch before is kept as well, in case the newer file is damaged later.

On start, `restore` loads the newest readable state of an epoch that
history.json records: a backup, else a checkpoint of the run (last.keras,
the kept epoch checkpoints, best.keras; each says which epoch it holds).
A state that does not load is passed over with a warning; a backup is also
renamed aside (`UNREADABLE_SUFFIX`), kept for inspection but never taken for
a good one again. With none left, training starts again from epoch 1, saying
so. The epochs after the restored one are trained again and `RunHistory`
replaces their entries. A state whose weights load but whose optimizer state
does not (the optimizer changed, e.g. with mixed precision) is an error: going
on would restart the learning-rate schedule and lose Adam's moments silently.

Keras' `BackupAndRestore` files (`latest.weights.h5`, its `.bkp` copy and
their `training_metadata.json`), written by earlier versions, are read too.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import keras

from keras_transformer.atomic import write_atomically
from keras_transformer.training import checkpoints
from keras_transformer.training import run_dir as run_dir_lib

logger = logging.getLogger(__name__)

# Added to a backup that does not load: kept, but no longer a backup.
UNREADABLE_SUFFIX = ".unreadable"
_BACKUP_NAME = re.compile(r"epoch_(\d+)\.weights\.h5")
_EPOCH_CHECKPOINT_NAME = re.compile(r"epoch_(\d+)\.keras")
# Keras' BackupAndRestore: (weights, metadata holding {"epoch": N}), newest first.
_KERAS_BACKUPS = (
    ("latest.weights.h5", "training_metadata.json"),
    ("latest.weights.h5.bkp", "training_metadata.json.bkp"),
)


def backup_path(run_dir: str | os.PathLike, epoch: int) -> Path:
    """The backup written after epoch `epoch` (counted from 1)."""
    return Path(run_dir) / run_dir_lib.BACKUP_DIR / f"epoch_{epoch:04d}.weights.h5"


def backups(run_dir: str | os.PathLike) -> dict[int, Path]:
    """Epoch -> the run's backup of it."""
    found = {}
    for path in (Path(run_dir) / run_dir_lib.BACKUP_DIR).glob("epoch_*.weights.h5"):
        match = _BACKUP_NAME.fullmatch(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def epochs_done(run_dir: str | os.PathLike) -> int:
    """The last epoch history.json records as done (0: none)."""
    return max((entry["epoch"] for entry in run_dir_lib.read_history(run_dir)), default=0)


def _keras_backups(backup_dir: Path) -> list[tuple[int, Path]]:
    found = []
    for weights, metadata in _KERAS_BACKUPS:
        try:
            epoch = json.loads((backup_dir / metadata).read_text(encoding="utf-8"))["epoch"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if (backup_dir / weights).is_file():
            found.append((int(epoch), backup_dir / weights))
    return found


def _checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    found = []
    for name in (run_dir_lib.LAST_CHECKPOINT, run_dir_lib.BEST_CHECKPOINT):
        record = checkpoints.read_record(run_dir / name)
        if record and "epoch" in record:
            found.append((int(record["epoch"]), run_dir / name))
    for path in run_dir_lib.epoch_checkpoints(run_dir):
        match = _EPOCH_CHECKPOINT_NAME.fullmatch(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return found


def saved_states(run_dir: str | os.PathLike, done: int) -> list[tuple[int, Path]]:
    """(epoch, file) of every saved state of epochs 1..`done`, in the order to try them:
    newest epoch first, and for one epoch the backups before the checkpoints."""
    run_dir = Path(run_dir)
    backup_dir = run_dir / run_dir_lib.BACKUP_DIR
    found = [*backups(run_dir).items(), *_keras_backups(backup_dir), *_checkpoints(run_dir)]
    # sorted() is stable: among states of one epoch, the backups stay first.
    return sorted(
        ((epoch, path) for epoch, path in found if 0 < epoch <= done), key=lambda s: -s[0]
    )


def restore(model: keras.Model, run_dir: str | os.PathLike, done: int) -> int:
    """Loads into `model` the newest readable state of epochs 1..`done` of the run in
    `run_dir`; returns its epoch, or 0 when the run starts again from epoch 1."""
    states = saved_states(run_dir, done)
    # The optimizer steps history.json records after each epoch (entries of
    # earlier versions may lack them).
    steps = {
        entry["epoch"]: entry["optimizer_steps"]
        for entry in run_dir_lib.read_history(run_dir)
        if "optimizer_steps" in entry
    }
    if states and model.optimizer is not None and not model.optimizer.built:
        # The optimizer's variables must exist for its state to be loaded into them.
        model.optimizer.build(model.trainable_variables)
    variables = list(model.weights) + list(model.optimizer.variables if model.optimizer else [])
    initial = [variable.numpy() for variable in variables]
    for epoch, path in states:
        try:
            model.load_weights(path)
        # A damaged file fails in many ways (h5py's OSError, KeyError, zipfile's
        # BadZipFile, Keras' ValueError): whatever it is, the next state is tried.
        except Exception as error:
            # A backup is renamed aside rather than deleted: the cause may not be
            # the file (a lock, a full disk), and what it holds is then not lost.
            # Checkpoints stay (the next epochs write them again).
            aside = ""
            if path in backups(run_dir).values():
                path.rename(path.with_name(path.name + UNREADABLE_SUFFIX))
                aside = f"; renamed to {path.name}{UNREADABLE_SUFFIX}"
            logger.warning("%s cannot be loaded (%s)%s; trying an older state.", path, error, aside)
            continue
        _check_optimizer_restored(model, path, steps.get(epoch))
        if epoch < done:
            logger.warning(
                "%s: resuming after epoch %d, the newest readable state of the %d epochs "
                "done; the epochs after it are trained again.",
                run_dir,
                epoch,
                done,
            )
        return epoch
    # A failed load may have set some variables: start from the initial values.
    for variable, value in zip(variables, initial, strict=True):
        variable.assign(value)
    if done:
        logger.warning(
            "%s: history.json records %d epochs done, but none of their backups or "
            "checkpoints can be loaded: training again from epoch 1.",
            run_dir,
            done,
        )
    return 0


def _check_optimizer_restored(model: keras.Model, path: Path, expected: int | None) -> None:
    """Keras skips an optimizer state that does not fit the optimizer with only a
    warning; the step count tells whether it came back."""
    if expected is None or model.optimizer is None:
        return
    restored = int(model.optimizer.iterations.numpy())
    if restored != expected:
        raise ValueError(
            f"{path} holds the run's weights but its optimizer state did not load into this "
            f"run's optimizer ({restored} steps instead of {expected}): the optimizer settings "
            "differ from those the run was trained with (mixed_precision?). Resume with the "
            "run's settings, or use another run directory."
        )


class RunBackup(keras.callbacks.Callback):
    """Restores the run on start and backs it up after every epoch (see the module's doc).

    Must come before `RunHistory` among the callbacks: an epoch's backup is on
    disk before history.json records the epoch done.
    """

    def __init__(self, run_dir: str | os.PathLike):
        super().__init__()
        self.run_dir = Path(run_dir)

    def on_train_begin(self, logs=None):
        self.model._initial_epoch = restore(self.model, self.run_dir, epochs_done(self.run_dir))

    def on_epoch_end(self, epoch, logs=None):
        path = backup_path(self.run_dir, epoch + 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, lambda partial: self.model.save_weights(partial))
        # Keep this epoch's and the one before (the last recorded done until
        # history.json records this one); earlier ones, and those of Keras'
        # BackupAndRestore, are no longer needed.
        for old_epoch, old in [*backups(self.run_dir).items(), *_keras_backups(path.parent)]:
            if old_epoch < epoch:
                old.unlink()
