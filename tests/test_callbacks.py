"""The callbacks of a training run (`callbacks.py`)."""

import logging
import math
import time
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer.training import callbacks as callbacks_lib
from keras_transformer.training import checkpoints, run_dir
from keras_transformer.training.callbacks import (
    Checkpoint,
    EpochCheckpoints,
    NonFiniteLoss,
    ProjectedEnd,
    TimeBudget,
    make_callbacks,
)
from keras_transformer.training.losses import MaskedLoss
from keras_transformer.training.schedules import Cooldown, InverseSqrtSchedule, make_optimizer
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

    def start(*callbacks, steps=None):
        model = type("FakeModel", (), {"optimizer": keras.optimizers.Adam()})()
        model.stop_training = False
        for callback in callbacks:
            callback.set_model(model)
            callback.set_params({"steps": steps})
        return model, callbacks

    def epoch(run, index, seconds=1, steps=10):
        model, callbacks = run
        for callback in callbacks:
            callback.on_epoch_begin(index)
        clock[0] += seconds
        model.optimizer.iterations.assign_add(steps)
        for callback in callbacks:  # TimeBudget first, as make_callbacks orders them
            callback.on_epoch_end(index)
        return float(schedule.last_step.numpy())

    # A fresh run with a time budget: unknown until an epoch is timed.
    budget = TimeBudget(minutes=5)
    run = start(budget, ProjectedEnd(schedule, epochs=100, budget=budget))
    for callback in run[1]:
        callback.on_train_begin()
    run[1][1].on_epoch_begin(0)
    assert not math.isfinite(float(schedule.last_step.numpy()))
    # 100 s of the 300 s budget: two more 100 s epochs fit, of 10 steps each.
    assert epoch(run, 0, seconds=100) == 30
    # A faster epoch (60 s) leaves 140 s: the run ends after three more.
    assert epoch(run, 1, seconds=60) == 50
    # Past the budget (TimeBudget stops the run) it ends with this epoch.
    assert epoch(run, 2, seconds=300) == 30 and run[0].stop_training

    # A run resumed at epoch 3 of 5 after 30 steps knows its end before its
    # first epoch: 15 steps an epoch so far, three epochs left.
    resumed = start(ProjectedEnd(schedule, epochs=5))
    resumed[0].optimizer.iterations.assign(30)
    resumed[1][0].on_train_begin()
    resumed[1][0].on_epoch_begin(2)
    assert float(schedule.last_step.numpy()) == 30 + 3 * 15
    # After an epoch of 12 steps, the mean is of this process's epochs.
    assert epoch(resumed, 2, steps=12) == 42 + 2 * 12

    with pytest.raises(ValueError, match="epochs"):
        make_callbacks(Path("unused"), cooldown_schedule=schedule)
    with pytest.raises(ValueError, match="Cooldown"):
        ProjectedEnd(InverseSqrtSchedule(1e-3), epochs=3)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_fit_cools_its_last_updates_to_the_projected_end(tmp_path, jit_compile):
    model = tiny_transformer()
    schedule = Cooldown(InverseSqrtSchedule(1e-3, warmup_steps=2), 0.5)
    model.compile(
        optimizer=make_optimizer(model.d_model, learning_rate=schedule),
        loss=MaskedLoss(),
        jit_compile=jit_compile,
    )
    ids = np.array([[5, 6, 7, 0], [4, 3, 0, 0]])
    rates = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: rates.append(float(model.optimizer.learning_rate))
    )
    callbacks = make_callbacks(tmp_path, cooldown_schedule=schedule, epochs=3)
    model.fit((ids, ids), ids, batch_size=1, epochs=3, verbose=0, callbacks=[*callbacks, record])
    # Two steps an epoch (known before the first), three epochs: 6 updates, seeing
    # steps 0-5; the last half of them at (6 - step) / 3 of the schedule's rate.
    factors = [1, 1, 1, 1, 2 / 3, 1 / 3]
    expected = [float(schedule.schedule(step)) * f for step, f in enumerate(factors)]
    assert rates == pytest.approx(expected, rel=1e-5)
    assert float(schedule.last_step.numpy()) == 6
    # history.json records the rate each epoch leaves: the next update's.
    history = run_dir.read_history(tmp_path)
    left = [float(schedule.schedule(2)), float(schedule.schedule(4)) * 2 / 3, 0.0]
    assert [e["learning_rate"] for e in history] == pytest.approx(left, rel=1e-5)


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
    with caplog.at_level(logging.WARNING, logger="keras_transformer.training.callbacks"):
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


def test_an_epoch_is_saved_once_and_copied_to_its_other_checkpoints(tmp_path, monkeypatch):
    """The run's checkpoint callbacks, in `make_callbacks`' order, save each epoch's state
    once (last.keras); best.keras and the epoch's kept checkpoint, when the epoch writes
    them, are copies of that file: the same bytes, each a file of its own, so that damage
    to one leaves the others whole."""
    model = _compiled_model()
    saved = []
    save = type(model).save

    def counted_save(self, path, *args, **kwargs):
        saved.append(Path(path).name)
        return save(self, path, *args, **kwargs)

    monkeypatch.setattr(type(model), "save", counted_save)
    callbacks = make_callbacks(tmp_path, keep_epoch_checkpoints=3)
    writers = [c for c in callbacks if isinstance(c, (Checkpoint, EpochCheckpoints))]
    for writer in writers:
        writer.set_model(model)
        writer.on_train_begin()
    last, best = tmp_path / run_dir.LAST_CHECKPOINT, tmp_path / run_dir.BEST_CHECKPOINT
    ids = np.array([[5, 6, 7, 0], [4, 3, 0, 0]])
    last_bytes, best_bytes = {}, {}
    for epoch, val_loss in enumerate([2.0, 3.0, 1.0]):  # the second epoch is not the best
        model.fit((ids, ids), ids, epochs=1, verbose=0)  # other weights each epoch
        for writer in writers:
            writer.on_epoch_end(epoch, {"loss": 1.0, "val_loss": val_loss})
        last_bytes[epoch + 1], best_bytes[epoch + 1] = last.read_bytes(), best.read_bytes()
    assert len(saved) == 3  # one save an epoch (through a scratch directory)
    assert best_bytes == {1: last_bytes[1], 2: last_bytes[1], 3: last_bytes[3]}
    assert last_bytes[3] != last_bytes[1]
    assert checkpoints.read_record(best) == {"epoch": 3, "val_loss": 1.0}
    kept = run_dir.epoch_checkpoints(tmp_path)
    assert [p.name for p in kept] == ["epoch_0001.keras", "epoch_0002.keras", "epoch_0003.keras"]
    for epoch, path in enumerate(kept, start=1):
        assert path.read_bytes() == last_bytes[epoch], path.name
    assert checkpoints.read_record(kept[1]) == {"epoch": 2, "val_loss": 3.0}
    with open(last, "r+b") as damaged:  # cut short in place
        damaged.truncate(100)
    assert checkpoints.read_record(last) is None
    for path in (best, kept[-1]):
        restored = checkpoints.load_model(path)
        # atol 0: the same weights through the same eager ops in this process, so the same
        # kernels on any CPU; only a checkpoint that lost or changed a weight differs.
        assert_close(restored((ids, ids)), model((ids, ids)), atol=0)


def test_an_epoch_checkpoint_is_saved_when_the_last_one_did_not_save_its_epoch(tmp_path):
    """Without last.keras of the same epoch to copy (its callback given but not run), the
    epoch checkpoint is saved from the model, with the same record a copy would hold."""
    model = _compiled_model()
    last = Checkpoint(tmp_path / run_dir.LAST_CHECKPOINT)
    epochs = EpochCheckpoints(tmp_path, keep=1, copy_of=last)
    epochs.set_model(model)
    epochs.on_epoch_end(0, {"loss": 1.0, "val_loss": 2.0})
    assert not last.path.exists()
    (path,) = run_dir.epoch_checkpoints(tmp_path)
    assert checkpoints.read_record(path) == {"epoch": 1, "val_loss": 2.0}
