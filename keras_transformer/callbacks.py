"""The callbacks of a training run: history file and curves, time budget, checkpoints, backups."""

from __future__ import annotations

import os
import time
from pathlib import Path

import keras

from keras_transformer import run_dir as run_dir_lib
from keras_transformer.plotting import plot_training_curves


class RunHistory(keras.callbacks.Callback):
    """Keeps history.json (and the curves PNG) up to date after every epoch.

    Survives a resume: the file holds every completed epoch of the run, and
    an epoch that is trained again replaces its earlier entry. Also records
    the epoch's wall time, its training time and target tokens per second.
    """

    def __init__(self, run_dir: str | os.PathLike, plot: bool = True):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.plot = plot
        self.entries: list[dict] = []

    def on_train_begin(self, logs=None):
        self.entries = run_dir_lib.read_history(self.run_dir)

    def on_epoch_begin(self, epoch, logs=None):
        self.entries = [e for e in self.entries if e["epoch"] <= epoch]
        self._start = time.perf_counter()
        self._train_end = None

    def on_test_begin(self, logs=None):
        if getattr(self, "_start", None) is not None and self._train_end is None:
            self._train_end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        end = time.perf_counter()
        train_seconds = (self._train_end or end) - self._start
        entry = {"epoch": epoch + 1, **{k: float(v) for k, v in (logs or {}).items()}}
        entry["epoch_seconds"] = end - self._start
        entry["train_seconds"] = train_seconds
        entry["optimizer_steps"] = int(self.model.optimizer.iterations.numpy())
        if "target_tokens" in entry:
            entry["target_tokens_per_second"] = entry["target_tokens"] / train_seconds
        self.entries.append(entry)
        run_dir_lib.write_json_atomically(
            self.run_dir / run_dir_lib.HISTORY_FILE, self.entries, indent=1
        )
        if self.plot:
            plot_training_curves(self.entries, self.run_dir / run_dir_lib.CURVES_FILE)
        self._start = None


class TimeBudget(keras.callbacks.Callback):
    """Ends training after the first epoch that finishes past `minutes` of this process.

    Checked at epoch ends only, so every epoch is complete and checkpointed;
    a resumed run gets a fresh budget.
    """

    def __init__(self, minutes: float):
        super().__init__()
        if minutes <= 0:
            raise ValueError(f"time_budget_minutes must be positive. Received: {minutes}")
        self.seconds = minutes * 60.0
        self._start = time.monotonic()

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        if time.monotonic() - self._start >= self.seconds:
            print(
                f"\nTime budget of {self.seconds / 60:g} minutes reached after epoch {epoch + 1}."
            )
            self.model.stop_training = True


class EpochCheckpoints(keras.callbacks.Callback):
    """Saves the model after every epoch as `checkpoints/epoch_NNNN.keras`, keeping the last `keep`.

    They are what `export --average-last N` averages. Each is written under a
    temporary name and renamed, so a kill never leaves half a checkpoint.
    """

    def __init__(self, run_dir: str | os.PathLike, keep: int):
        super().__init__()
        if keep <= 0:
            raise ValueError(f"keep must be positive. Received: keep={keep}")
        self.run_dir = Path(run_dir)
        self.keep = keep

    def on_epoch_end(self, epoch, logs=None):
        path = run_dir_lib.epoch_checkpoint(self.run_dir, epoch + 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(".partial." + path.name)
        self.model.save(partial)
        os.replace(partial, path)
        for old in run_dir_lib.epoch_checkpoints(self.run_dir)[: -self.keep]:
            old.unlink()


def make_callbacks(
    run_dir: Path,
    best_val_loss: float | None,
    time_budget_minutes: float | None = None,
    early_stopping_patience: int | None = None,
    keep_epoch_checkpoints: int = 0,
) -> list:
    """History, backups (resume after a kill), best/last checkpoints, TensorBoard, NaN stop;
    with `keep_epoch_checkpoints`, the last epochs' checkpoints for averaging."""
    callbacks = [
        # First, so that an epoch is in history.json before its backup claims it done.
        RunHistory(run_dir),
        keras.callbacks.ModelCheckpoint(
            run_dir / run_dir_lib.BEST_CHECKPOINT,
            monitor="val_loss",
            save_best_only=True,
            # After a resume, only an epoch better than the run's best so far replaces it.
            initial_value_threshold=best_val_loss,
        ),
        keras.callbacks.ModelCheckpoint(run_dir / run_dir_lib.LAST_CHECKPOINT),
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.TensorBoard(
            run_dir / run_dir_lib.LOG_DIR, update_freq="epoch", write_graph=False
        ),
        # Kept after the run (delete_checkpoint=False): training again with more
        # epochs continues where it stopped. Two copies survive a kill mid-write.
        keras.callbacks.BackupAndRestore(
            run_dir / run_dir_lib.BACKUP_DIR, double_checkpoint=True, delete_checkpoint=False
        ),
    ]
    if keep_epoch_checkpoints:
        # Before the backup, like the other checkpoints: a kill after the backup
        # claims the epoch done must find its checkpoint written.
        callbacks.insert(3, EpochCheckpoints(run_dir, keep_epoch_checkpoints))
    if time_budget_minutes:
        callbacks.append(TimeBudget(time_budget_minutes))
    if early_stopping_patience:
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor="val_loss", patience=early_stopping_patience, verbose=1
            )
        )
    return callbacks
