"""The run's backup (`backup.py`): what a run resumes from, whatever moment a fault hit.

The faults are injected at exact moments (a callback or a writer that dies
between two writes), not by timing a kill; benchmarks/faults.py kills real
runs with SIGKILL.
"""

import json
import logging

import h5py
import keras
import numpy as np
import pytest

from keras_transformer import training
from keras_transformer.inference import export
from keras_transformer.training import backup, checkpoints, run_dir
from keras_transformer.training.callbacks import RunHistory
from keras_transformer.training.losses import MaskedLoss
from tests.helpers import caught_export_saves, tiny_transformer
from tests.test_training import TINY

IDS = np.array([[5, 6, 7, 0], [4, 3, 0, 0]])


class Killed(Exception):
    """Stands for the process dying at the injected moment."""


def _compiled(seed: int, steps: int = 0) -> keras.Model:
    model = tiny_transformer(seed=seed)
    # Eager: a few steps of a tiny model cost less than tracing the train step.
    model.compile(optimizer="adam", loss=MaskedLoss(), run_eagerly=True)
    if steps:
        model.fit((IDS, IDS), IDS, epochs=steps, verbose=0)
    return model


def _values(model: keras.Model) -> list:
    return [v.numpy() for v in [*model.weights, *model.optimizer.variables]]


def _assert_same_state(model: keras.Model, expected: list) -> None:
    for value, want in zip(_values(model), expected, strict=True):
        np.testing.assert_array_equal(value, want)


def _record_history(path, epochs: int) -> None:
    run_dir.write_json_atomically(
        path / run_dir.HISTORY_FILE, [{"epoch": e} for e in range(1, epochs + 1)]
    )


def _save_backup(path, epoch: int, model: keras.Model) -> list:
    target = backup.backup_path(path, epoch)
    target.parent.mkdir(parents=True, exist_ok=True)
    model.save_weights(target)
    return _values(model)


def _truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_restores_the_newest_backup_of_an_epoch_the_history_records(tmp_path):
    states = {epoch: _save_backup(tmp_path, epoch, _compiled(epoch, epoch)) for epoch in (1, 2, 3)}
    # Epoch 3's backup is written but history.json does not record the epoch:
    # it was not done, and is trained again.
    _record_history(tmp_path, 2)
    model = _compiled(seed=9)
    assert backup.restore(model, tmp_path, backup.epochs_done(tmp_path)) == 2
    _assert_same_state(model, states[2])
    assert int(model.optimizer.iterations.numpy()) == 2  # the optimizer state came back too


def test_an_unreadable_backup_falls_back_to_the_newest_readable_state(tmp_path, caplog):
    older = _save_backup(tmp_path, 1, _compiled(1, 1))
    _save_backup(tmp_path, 2, _compiled(2, 2))
    _truncate(backup.backup_path(tmp_path, 2))
    _record_history(tmp_path, 2)
    model = _compiled(seed=9)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.training.backup"):
        assert backup.restore(model, tmp_path, 2) == 1
    _assert_same_state(model, older)
    assert "epoch_0002.weights.h5 cannot be loaded" in caplog.text
    # Renamed aside: kept, but never taken for a good backup later.
    assert sorted(backup.backups(tmp_path)) == [1]
    assert (tmp_path / run_dir.BACKUP_DIR / "epoch_0002.weights.h5.unreadable").is_file()
    assert "resuming after epoch 1, the newest readable state of the 2 epochs done" in caplog.text


def test_with_no_readable_backup_the_last_checkpoint_serves(tmp_path):
    # The kill the campaign found: the first epoch's backup is unreadable and no
    # older copy exists. The last checkpoint records the same epoch.
    _save_backup(tmp_path, 1, _compiled(1, 1))
    _truncate(backup.backup_path(tmp_path, 1))
    trained = _compiled(2, 1)
    checkpoints.save_checkpoint(trained, tmp_path / run_dir.LAST_CHECKPOINT, epoch=1)
    _record_history(tmp_path, 1)
    model = _compiled(seed=9)
    assert backup.restore(model, tmp_path, 1) == 1
    _assert_same_state(model, _values(trained))


def test_keras_backups_of_earlier_versions_are_read_and_a_damaged_one_is_passed_over(
    tmp_path, caplog
):
    backup_dir = tmp_path / run_dir.BACKUP_DIR
    backup_dir.mkdir()
    trained = _compiled(1, 2)
    trained.save_weights(backup_dir / "latest.weights.h5")
    (backup_dir / "training_metadata.json").write_text(json.dumps({"epoch": 2, "batch": 0}))
    _record_history(tmp_path, 2)
    model = _compiled(seed=9)
    assert backup.restore(model, tmp_path, 2) == 2
    _assert_same_state(model, _values(trained))
    # Killed 20 ms into its first write, without a .bkp copy: every start failed
    # with OSError. Now the run starts again from epoch 1, and says so.
    _truncate(backup_dir / "latest.weights.h5")
    model = _compiled(seed=9)
    model.optimizer.build(model.trainable_variables)
    initial = _values(model)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.training.backup"):
        assert backup.restore(model, tmp_path, 2) == 0
    _assert_same_state(model, initial)  # not half loaded from the damaged file
    assert "training again from epoch 1" in caplog.text


def test_backups_of_all_but_the_last_two_epochs_are_deleted(tmp_path):
    model = _compiled(1)
    callback = backup.RunBackup(tmp_path)
    model.fit((IDS, IDS), IDS, epochs=4, verbose=0, callbacks=[callback])
    assert sorted(backup.backups(tmp_path)) == [3, 4]
    assert sorted(p.name for p in (tmp_path / run_dir.BACKUP_DIR).iterdir()) == [
        "epoch_0003.weights.h5",
        "epoch_0004.weights.h5",
    ]


# ----------------------------------------------------------------------------- whole runs

SMALL_RUN = {**TINY, "demo_pairs": 200, "epochs": 2}


class Fault(keras.callbacks.Callback):
    """Raises at the end of epoch `epoch` (counted from 1)."""

    def __init__(self, epoch: int):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.epoch:
            raise Killed


class EpochsRun(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch + 1)


def _with_callback(monkeypatch, callback, before=None):
    """train() with `callback` among its callbacks, just before the first of type `before`
    (at the end if None)."""
    make = training.run.make_callbacks

    def patched(*args, **kwargs):
        callbacks = make(*args, **kwargs)
        types = [type(c) for c in callbacks]
        at = types.index(before) if before else len(callbacks)
        return [*callbacks[:at], callback, *callbacks[at:]]

    monkeypatch.setattr(training.run, "make_callbacks", patched)


def _die_mid_write(monkeypatch, module, epoch: int) -> None:
    """Makes `module`'s write_atomically die halfway through the file of epoch `epoch`."""
    real = module.write_atomically

    def write(path, writer):
        if f"epoch_{epoch:04d}" not in path.name:
            return real(path, writer)

        def half(partial):
            writer(partial)
            _truncate(partial)
            raise Killed

        return real(path, half)

    monkeypatch.setattr(module, "write_atomically", write)


def _all_files_whole(path) -> None:
    run_dir.load_tokenizers(path)
    for name in (run_dir.BEST_CHECKPOINT, run_dir.LAST_CHECKPOINT):
        assert checkpoints.read_record(path / name), name
    for state in backup.backups(path).values():
        with h5py.File(state, "r") as weights:
            weights.visititems(lambda _, item: item[()] if isinstance(item, h5py.Dataset) else None)
    assert not list(path.rglob(".partial.*"))


@pytest.mark.slow
def test_a_fault_at_each_epoch_end_write_costs_no_recorded_epoch(tmp_path, monkeypatch):
    # One run, faulted at the end of epoch 2, 3 and 4, each time at another of the
    # moments between its writes, and started again after each fault.
    faults = {
        2: lambda: _with_callback(monkeypatch, Fault(2), before=backup.RunBackup),
        3: lambda: _die_mid_write(monkeypatch, backup, 3),  # checkpoints written, backup half
        4: lambda: _with_callback(monkeypatch, Fault(4), before=RunHistory),
    }
    config = {**SMALL_RUN, "epochs": 4}
    for faulty_epoch, inject in [*faults.items(), (None, lambda: None)]:
        recorded = backup.epochs_done(tmp_path)
        inject()
        epochs_run = EpochsRun()
        _with_callback(monkeypatch, epochs_run)
        if faulty_epoch is None:
            training.train(config, tmp_path, verbose=0)
        else:
            with pytest.raises(Killed):
                training.train(config, tmp_path, verbose=0)
        monkeypatch.undo()
        # No epoch recorded done is trained again: each start goes on after the
        # last one, and the faulty epoch is never recorded done.
        assert epochs_run.epochs[0] == recorded + 1, (faulty_epoch, epochs_run.epochs)
        assert backup.epochs_done(tmp_path) == (faulty_epoch or 5) - 1
    entries = run_dir.read_history(tmp_path)
    assert [e["epoch"] for e in entries] == [1, 2, 3, 4]
    # Each epoch went on from the optimizer state of the one recorded before it
    # (not from a checkpoint of the faulty epoch, which would count its steps twice).
    steps = [e["optimizer_steps"] for e in entries]
    assert steps == [steps[0] * epoch for epoch in (1, 2, 3, 4)], steps
    _all_files_whole(tmp_path)


@pytest.mark.slow
def test_a_damaged_best_checkpoint_and_a_lone_unreadable_backup_do_not_stop_the_run(
    tmp_path, monkeypatch, caplog
):
    training.train({**SMALL_RUN, "epochs": 1}, tmp_path, verbose=0)
    # As the in-place writes of earlier versions could leave them: a truncated
    # best.keras, and a first backup cut short with no older copy to fall back to.
    _truncate(tmp_path / run_dir.BEST_CHECKPOINT)
    _truncate(backup.backup_path(tmp_path, 1))
    epochs_run = EpochsRun()
    _with_callback(monkeypatch, epochs_run)
    with caplog.at_level(logging.WARNING):
        training.train(SMALL_RUN, tmp_path, verbose=0)
    # Resumed from last.keras, which records epoch 1.
    assert epochs_run.epochs == [2]
    assert "epoch_0001.weights.h5 cannot be loaded" in caplog.text
    assert "best.keras is unreadable; the next epoch writes it again" in caplog.text
    assert checkpoints.read_record(tmp_path / run_dir.BEST_CHECKPOINT)["epoch"] == 2
    _all_files_whole(tmp_path)
    # The run exports: its best checkpoint loads into the translator that is saved (the
    # save itself is caught: what an export writes is test_export.py's).
    saved = caught_export_saves(monkeypatch)
    export.export_run(tmp_path, tmp_path / "saved_models", "tiny")
    (translator,) = saved
    best, *_ = run_dir.load_run(tmp_path)
    for mine, theirs in zip(translator.model.weights, best.weights, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_a_state_whose_optimizer_state_does_not_load_is_an_error_not_a_silent_restart(tmp_path):
    # Weights fit but the optimizer does not (here: a loss-scale wrapper, as
    # mixed precision adds): Keras only warns and keeps a fresh optimizer, which
    # would restart the learning-rate warmup with zeroed moments.
    _save_backup(tmp_path, 1, _compiled(1, 3))
    run_dir.write_json_atomically(
        tmp_path / run_dir.HISTORY_FILE, [{"epoch": 1, "optimizer_steps": 3}]
    )
    model = _compiled(seed=9)
    model.optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())
    with pytest.raises(ValueError, match=r"optimizer state did not load .*0 steps instead of 3"):
        backup.restore(model, tmp_path, 1)
