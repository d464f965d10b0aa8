"""The callbacks of a training run (`callbacks.py`)."""

import logging
import time
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer import callbacks as callbacks_lib
from keras_transformer import checkpoints, run_dir
from keras_transformer.callbacks import (
    Checkpoint,
    EpochCheckpoints,
    NonFiniteLoss,
    ProjectedEnd,
    TimeBudget,
    make_callbacks,
)
from keras_transformer.losses import MaskedLoss
from keras_transformer.schedules import Cooldown, InverseSqrtSchedule, make_optimizer
from tests.helpers import assert_close, tiny_transformer


def test_time_budget_stops_after_the_epoch_that_passes_it():
    budget = TimeBudget(minutes=1e-6)
    budget.set_model(type("FakeModel", (), {"stop_training": False})())
    budget.on_train_begin()
    time.sleep(0.01)
    budget.on_epoch_end(0)
    assert budget.model.stop_training
    generous = TimeBudget(minutes=60)
    generous.set_model(type("FakeModel", (), {"stop_training": False})())
    generous.on_train_begin()
    generous.on_epoch_end(0)
    assert not generous.model.stop_training
    with pytest.raises(ValueError, match="time_budget_minutes"):
        TimeBudget(minutes=0)


def test_the_projected_end_counts_epochs_left_by_number_and_by_time(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(callbacks_lib.time, "monotonic", lambda: clock[0])
    schedule = Cooldown(InverseSqrtSchedule(1e-3), 0.2)
    model = type("FakeModel", (), {"optimizer": keras.optimizers.Adam()})()

    def start(callback):
        callback.set_model(model)
        callback.on_train_begin()
        return callback

    def epoch(callback, index, seconds, steps):
        callback.on_epoch_begin(index)
        clock[0] += seconds
        model.optimizer.iterations.assign_add(steps)
        callback.on_epoch_end(index)
        return float(schedule.last_step.numpy())

    by_time = start(ProjectedEnd(schedule, epochs=100, minutes=5))
    # 100 s of the 300 s budget: two more 100 s epochs fit, of 10 steps each.
    assert epoch(by_time, 0, 100, 10) == 30
    # A faster epoch (60 s) leaves 140 s: the run ends after three more.
    assert epoch(by_time, 1, 60, 10) == 50
    # Past the budget the run ends with this epoch.
    assert epoch(by_time, 2, 300, 10) == 30
    # A resumed run (at epoch 3 of 4, step 30) projects from where it resumes.
    by_number = start(ProjectedEnd(schedule, epochs=4))
    assert epoch(by_number, 2, 1, 12) == 30 + 12 + 12
    with pytest.raises(ValueError, match="epochs"):
        make_callbacks(Path("unused"), cooldown_schedule=schedule)


def test_a_fit_with_a_cooldown_ends_at_its_projected_step(tmp_path):
    model = tiny_transformer()
    schedule = Cooldown(InverseSqrtSchedule(1e-3, warmup_steps=2), 0.5)
    model.compile(
        optimizer=make_optimizer(model.d_model, learning_rate=schedule),
        loss=MaskedLoss(),
        run_eagerly=True,
    )
    ids = np.array([[5, 6, 7, 0], [4, 3, 0, 0]])
    seen = []
    record = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: seen.append(float(schedule.last_step.numpy()))
    )
    callbacks = make_callbacks(tmp_path, cooldown_schedule=schedule, epochs=3)
    model.fit((ids, ids), ids, batch_size=1, epochs=3, verbose=0, callbacks=[*callbacks, record])
    # Two steps an epoch, three epochs: the end is step 6 from the first epoch on,
    # and the last step ran at (6 + 1 - 6) / 3 of the rate.
    assert seen == [6.0, 6.0, 6.0]
    assert float(schedule(6)) == pytest.approx(float(schedule.schedule(6)) / 3, rel=1e-5)


def _compiled_model() -> keras.Model:
    model = tiny_transformer()
    # Eager: a few steps of a tiny model cost less than tracing the train step.
    model.compile(optimizer="adam", loss=MaskedLoss(), run_eagerly=True)
    return model


def test_epoch_checkpoints_keep_the_last_epochs(tmp_path):
    model = _compiled_model()
    ids = np.array([[5, 6, 7, 0], [4, 3, 0, 0]])
    model.fit((ids, ids), ids, epochs=3, verbose=0, callbacks=[EpochCheckpoints(tmp_path, keep=2)])
    kept = run_dir.epoch_checkpoints(tmp_path)
    assert [p.name for p in kept] == ["epoch_0002.keras", "epoch_0003.keras"]
    # No partial file left behind, and the last one holds the final weights.
    assert sorted(p.name for p in kept[0].parent.iterdir()) == [p.name for p in kept]
    restored = keras.models.load_model(kept[-1], compile=False)
    assert_close(restored((ids, ids)), model((ids, ids)), atol=0)
    with pytest.raises(ValueError, match="keep"):
        EpochCheckpoints(tmp_path, keep=0)


def _fit_one_epoch(model, callback, val_loss: float) -> None:
    """One epoch whose validation loss the callback sees as `val_loss`."""
    ids = np.array([[5, 6, 7, 0], [4, 3, 0, 0]])
    callback.set_model(model)
    callback.on_train_begin()
    model.fit((ids, ids), ids, epochs=1, verbose=0)
    callback.on_epoch_end(0, {"loss": 1.0, "val_loss": val_loss})


def test_the_best_checkpoint_threshold_comes_from_the_file_on_disk(tmp_path):
    model = _compiled_model()
    best = tmp_path / "best.keras"
    # The history says 0.5 was reached, but the file on disk holds 2.0 (a run
    # killed after writing it, before recording the epoch): 1.5 is better.
    checkpoints.save_checkpoint(model, best, epoch=3, val_loss=2.0)
    callback = Checkpoint(best, best_only=True, best_before=0.5)
    _fit_one_epoch(model, callback, val_loss=1.5)
    assert checkpoints.read_record(best) == {"epoch": 1, "val_loss": 1.5}
    _fit_one_epoch(model, callback, val_loss=1.7)  # worse: kept
    assert checkpoints.read_record(best)["val_loss"] == 1.5
    # A best checkpoint of an earlier version, without a record, counts as best_before.
    model.save(best)
    callback = Checkpoint(best, best_only=True, best_before=0.5)
    _fit_one_epoch(model, callback, val_loss=0.7)
    assert checkpoints.read_record(best) == {}


def test_a_truncated_or_missing_best_checkpoint_is_written_by_the_next_epoch(tmp_path, caplog):
    model = _compiled_model()
    best = tmp_path / "checkpoints" / "best.keras"
    # As an in-place write killed halfway left it; the history's best (0.1) is
    # lower than any later epoch will reach, which kept it truncated for good.
    checkpoints.save_checkpoint(model, best, epoch=1, val_loss=0.1)
    best.write_bytes(best.read_bytes()[:3000])
    callback = Checkpoint(best, best_only=True, best_before=0.1)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.callbacks"):
        _fit_one_epoch(model, callback, val_loss=9.0)
    assert "best.keras is unreadable; the next epoch writes it again" in caplog.text
    assert checkpoints.read_record(best) == {"epoch": 1, "val_loss": 9.0}
    checkpoints.load_model(best)
    best.unlink()
    callback = Checkpoint(best, best_only=True, best_before=0.1)
    _fit_one_epoch(model, callback, val_loss=8.0)
    assert checkpoints.read_record(best)["val_loss"] == 8.0


def test_a_checkpoint_killed_mid_write_leaves_the_previous_one(tmp_path, monkeypatch):
    model = _compiled_model()
    last = tmp_path / "last.keras"
    checkpoints.save_checkpoint(model, last, epoch=1)

    class Killed(Exception):
        pass

    def save_half(self, path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"PK\x03\x04 half a zip")
        raise Killed

    monkeypatch.setattr(type(model), "save", save_half)
    callback = Checkpoint(last)
    with pytest.raises(Killed):
        _fit_one_epoch(model, callback, val_loss=1.0)
    assert checkpoints.read_record(last) == {"epoch": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["last.keras"]


def test_a_nan_loss_stops_training_before_the_epoch_writes_anything(tmp_path):
    # Keras' TerminateOnNaN lets the epoch end: the backup and history.json would
    # record NaN weights as a finished epoch, and the resume would go on from them.
    model = tiny_transformer()

    def nan_loss(y_true, y_pred):
        return keras.ops.mean(y_pred) * np.nan

    model.compile(optimizer="adam", loss=nan_loss, run_eagerly=True)
    ids = np.array([[5, 6, 7, 0], [4, 3, 0, 0]])
    with pytest.raises(NonFiniteLoss, match="became nan at batch 0 of epoch 1"):
        model.fit((ids, ids), ids, epochs=2, verbose=0, callbacks=make_callbacks(tmp_path))
    assert not (tmp_path / run_dir.HISTORY_FILE).exists()
    assert not list(tmp_path.rglob("*.keras")) and not list(tmp_path.rglob("*.h5"))
