"""The callbacks of a training run: history file and curves, time budget, learning-rate
cooldown, checkpoints, backups.

At the end of an epoch they write in a fixed order (`make_callbacks`): the
checkpoints (last.keras saved, and best.keras and the kept epoch checkpoint, when
the epoch writes them, copied from it), then the backup (`backup.RunBackup`), and
last history.json (`RunHistory`), which is what records the epoch done. Every file
is written whole or not at all (`atomic.write_atomically`).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import time
from pathlib import Path

import keras

from keras_transformer.atomic import write_atomically
from keras_transformer.training import checkpoints
from keras_transformer.training import run_dir as run_dir_lib
from keras_transformer.training.backup import RunBackup
from keras_transformer.training.curves import plot_training_curves
from keras_transformer.training.schedules import Cooldown

logger = logging.getLogger(__name__)


class RunHistory(keras.callbacks.Callback):
    """Keeps history.json (and the curves PNG) up to date after every epoch.

    history.json is the run's record of the epochs done, so this callback
    writes last, after the epoch's checkpoints and backup are on disk. It
    survives a resume: the file holds every completed epoch of the run, and an
    epoch that is trained again replaces its earlier entry. Also records the
    epoch's wall time, its training time, target tokens per second and the
    learning rate it leaves (a cooldown shows there).
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
        # The rate of the next update, as the schedule stands at the epoch's end.
        entry["learning_rate"] = float(self.model.optimizer.learning_rate)
        if "target_tokens" in entry:
            entry["target_tokens_per_second"] = entry["target_tokens"] / train_seconds
        self.entries.append(entry)
        run_dir_lib.write_json_atomically(
            self.run_dir / run_dir_lib.HISTORY_FILE, self.entries, indent=1
        )
        if self.plot:
            write_atomically(
                self.run_dir / run_dir_lib.CURVES_FILE,
                lambda partial: plot_training_curves(self.entries, partial),
            )
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

    def seconds_left(self) -> float:
        """What is left of the budget (negative once it is spent)."""
        return self.seconds - (time.monotonic() - self._start)

    def on_epoch_end(self, epoch, logs=None):
        if self.seconds_left() <= 0:
            print(
                f"\nTime budget of {self.seconds / 60:g} minutes reached after epoch {epoch + 1}."
            )
            self.model.stop_training = True


class ProjectedEnd(keras.callbacks.Callback):
    """Tells a `schedules.Cooldown` the run's last step, projected as the run goes.

    The run ends after `epochs`, or after the first epoch that finishes past
    the `budget` (a `TimeBudget`, which runs before this callback and stops the
    run), whichever comes first. At every epoch end the epochs left are counted
    from both, the budget's by the last epoch's duration, and an epoch's steps
    are the mean of this process's epochs so far. Before the first epoch ends,
    the end is known only where an epoch's steps are (`steps_per_epoch`, or a
    resumed run's steps so far over its epochs so far), and then only by count:
    the first epoch of a run without `steps_per_epoch` runs uncooled, and a
    resumed run's budget starts afresh (as `TimeBudget`'s does). With a time
    budget the end can move by an epoch when epochs change speed, and under the
    `multi_worker` strategy each worker would project from its own clock: there,
    cool a run bounded by `epochs` alone.
    """

    def __init__(self, schedule, epochs: int, budget: TimeBudget | None = None):
        super().__init__()
        if not isinstance(schedule, Cooldown):
            raise ValueError(f"ProjectedEnd needs a schedules.Cooldown. Received: {schedule!r}")
        if not epochs or epochs <= 0:
            raise ValueError(f"ProjectedEnd needs the run's epochs. Received: epochs={epochs}")
        self.schedule = schedule
        self.epochs = epochs
        self.budget = budget

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_train_begin(self, logs=None):
        self._first_step = self._step()
        self._epochs_done = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = time.monotonic()
        if self._epochs_done == 0:
            steps = self._first_step / epoch if epoch else self.params.get("steps")
            if steps:
                self.schedule.set_last_step(self._first_step + (self.epochs - epoch) * steps)

    def on_epoch_end(self, epoch, logs=None):
        now = time.monotonic()
        self._epochs_done += 1
        step = self._step()
        steps_per_epoch = (step - self._first_step) / self._epochs_done
        epochs_left = self.epochs - (epoch + 1)
        if self.model.stop_training:
            epochs_left = 0
        elif self.budget is not None:
            by_time = math.ceil(self.budget.seconds_left() / (now - self._epoch_start))
            epochs_left = min(epochs_left, max(1, by_time))
        if step > 0:
            self.schedule.set_last_step(step + epochs_left * steps_per_epoch)


class NonFiniteLoss(ValueError):
    """The training loss became NaN or infinite."""


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Ends training at the first batch whose loss is NaN or infinite, with an error.

    Unlike `keras.callbacks.TerminateOnNaN`'s default, which lets the epoch end
    (and the checkpoints, the backup and history.json then record NaN weights
    as a finished epoch), this raises before anything of the epoch is written:
    the run directory keeps its last finished epoch, to resume from with other
    settings.
    """

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise NonFiniteLoss(
                f"The training loss became {float(loss)} at batch {batch} of epoch "
                f"{self._epoch}; the run keeps its last finished epoch. Run again with a "
                "lower learning rate or gradient clipping to resume from it."
            )

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch + 1


class Checkpoint(keras.callbacks.Callback):
    """Saves the model to `path` after every epoch, or with `best_only` after an epoch
    whose validation loss is the lowest so far.

    Each checkpoint records its epoch (and validation loss) inside the file
    (`checkpoints.save_checkpoint`). The best so far is the one the file on
    disk records: a missing or unreadable best checkpoint is written again at
    the next epoch. One written by earlier versions, with no record, counts
    as `best_before` (the lowest validation loss in the run's history).

    `copy_of`: a `Checkpoint` that runs before this one at each epoch's end; an
    epoch it saved is copied from its file (`checkpoints.copy_checkpoint`) rather
    than saved again. Its record is this one's: both write the epoch and its
    validation loss.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        best_only: bool = False,
        best_before=None,
        copy_of: Checkpoint | None = None,
    ):
        super().__init__()
        self.path = Path(path)
        self.best_only = best_only
        self.best_before = best_before
        self.copy_of = copy_of
        self.best = None
        self.saved_epoch = None  # the last epoch (from 1) this callback wrote

    def on_train_begin(self, logs=None):
        if not self.best_only:
            return
        record = checkpoints.read_record(self.path)
        if record is None and self.path.exists():
            logger.warning("%s is unreadable; the next epoch writes it again.", self.path)
        self.best = None if record is None else record.get("val_loss", self.best_before)

    def on_epoch_end(self, epoch, logs=None):
        record = epoch_record(epoch, logs)
        val_loss = record.get("val_loss")
        if self.best_only:
            if val_loss is None or not math.isfinite(val_loss):
                return
            if self.best is not None and val_loss >= self.best:
                return
            self.best = float(val_loss)
        write_epoch_state(self.model, self.path, record, self.copy_of)
        self.saved_epoch = epoch + 1


def epoch_record(epoch: int, logs: dict | None) -> dict:
    """What a checkpoint of epoch `epoch` (from 0, as Keras counts) records: the epoch
    (from 1) and, when the epoch was validated, its validation loss."""
    val_loss = (logs or {}).get("val_loss")
    record = {"epoch": epoch + 1}
    if val_loss is not None:
        record["val_loss"] = float(val_loss)
    return record


def write_epoch_state(model, path: Path, record: dict, copy_of: Checkpoint | None) -> None:
    """Writes the state of the epoch `record` names to `path`: a copy of `copy_of`'s file if
    that callback saved this epoch, else the model saved anew with `record`."""
    if copy_of is not None and copy_of.saved_epoch == record["epoch"]:
        checkpoints.copy_checkpoint(copy_of.path, path)
    else:
        checkpoints.save_checkpoint(model, path, **record)


class EpochCheckpoints(keras.callbacks.Callback):
    """Saves the model after every epoch as `checkpoints/epoch_NNNN.keras`, keeping the last `keep`.

    They are what `export --average-last N` averages. Each is written whole
    or not at all, so a kill never leaves half a checkpoint, and records the epoch
    and its validation loss. With `copy_of` (the run's last-checkpoint callback,
    which runs first) each is a copy of that callback's file of the same epoch.
    """

    def __init__(self, run_dir: str | os.PathLike, keep: int, copy_of: Checkpoint | None = None):
        super().__init__()
        if keep <= 0:
            raise ValueError(f"keep must be positive. Received: keep={keep}")
        self.run_dir = Path(run_dir)
        self.keep = keep
        self.copy_of = copy_of

    def on_epoch_end(self, epoch, logs=None):
        path = run_dir_lib.epoch_checkpoint(self.run_dir, epoch + 1)
        write_epoch_state(self.model, path, epoch_record(epoch, logs), self.copy_of)
        for old in run_dir_lib.epoch_checkpoints(self.run_dir)[: -self.keep]:
            old.unlink()


def make_callbacks(
    run_dir: Path,
    best_val_loss: float | None = None,
    time_budget_minutes: float | None = None,
    early_stopping_patience: int | None = None,
    keep_epoch_checkpoints: int = 0,
    cooldown_schedule=None,
    epochs: int | None = None,
) -> list:
    """Checkpoints, backup (resume after a kill), history, TensorBoard (where TensorFlow
    is installed), NaN stop; with
    `keep_epoch_checkpoints`, the last epochs' checkpoints for averaging; with
    `cooldown_schedule` (a `schedules.Cooldown`), the projection of the run's end
    (`ProjectedEnd`) from `epochs` and `time_budget_minutes`.

    `best_val_loss`: the run's best validation loss so far, which a best
    checkpoint written by earlier versions (without its own record) counts as.
    """
    # The epoch's state is saved once, as last.keras; best.keras and the epoch's own
    # checkpoint are copies of that file (a base-size model's save serializes 533 MB).
    last = Checkpoint(run_dir / run_dir_lib.LAST_CHECKPOINT)
    callbacks = [
        StopOnNonFiniteLoss(),
        last,
        Checkpoint(
            run_dir / run_dir_lib.BEST_CHECKPOINT,
            best_only=True,
            best_before=best_val_loss,
            copy_of=last,
        ),
    ]
    if keep_epoch_checkpoints:
        callbacks.append(EpochCheckpoints(run_dir, keep_epoch_checkpoints, copy_of=last))
    callbacks += [
        # After the checkpoints and before the history: an epoch that history.json
        # records done has its checkpoints and backup on disk (see backup.py).
        RunBackup(run_dir),
        RunHistory(run_dir),
    ]
    if importlib.util.find_spec("tensorflow") is not None:
        # Keras writes TensorBoard's logs with TensorFlow; without it the run's
        # history and plots remain.
        tensorboard = keras.callbacks.TensorBoard(
            run_dir / run_dir_lib.LOG_DIR, update_freq="epoch", write_graph=False
        )
        callbacks.insert(-1, tensorboard)
    budget = TimeBudget(time_budget_minutes) if time_budget_minutes else None
    if budget is not None:
        callbacks.append(budget)
    if cooldown_schedule is not None:
        callbacks.append(ProjectedEnd(cooldown_schedule, epochs, budget))
    if early_stopping_patience:
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor="val_loss", patience=early_stopping_patience, verbose=1
            )
        )
    return callbacks
