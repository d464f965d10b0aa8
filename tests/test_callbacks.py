"""The callbacks of a training run (`callbacks.py`)."""

import time

import keras
import numpy as np
import pytest

from keras_transformer import run_dir
from keras_transformer.callbacks import EpochCheckpoints, TimeBudget
from keras_transformer.losses import MaskedLoss
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


def test_epoch_checkpoints_keep_the_last_epochs(tmp_path):
    model = tiny_transformer()
    model.compile(optimizer="adam", loss=MaskedLoss())
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
