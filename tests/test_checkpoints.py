"""Checkpoints written by earlier versions still load, with the same outputs."""

import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from keras_transformer import Transformer, checkpoints
from tests.helpers import assert_close

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["v0_post_ln", "v0_pre_ln_tied"])
def test_pre_0_2_checkpoints_load_with_the_same_logits(name):
    # Written by version 0.1 (the attention projections and layer norms held
    # directly by the sublayers), with the logits it gave for these ids.
    expected = np.load(DATA / f"{name}.npz")
    model = checkpoints.load_model(DATA / f"{name}.keras")
    logits = model((expected["context"], expected["target"]))
    assert_close(logits, expected["logits"], atol=1e-6)


def test_current_checkpoints_load_unchanged(tmp_path):
    model = Transformer(
        num_layers=1, d_model=8, num_heads=2, dff=16, input_vocab_size=13, target_vocab_size=11
    )
    ids = np.array([[5, 6, 7, 0]])
    logits = model((ids, ids))
    model.save(tmp_path / "model.keras")
    with (
        zipfile.ZipFile(tmp_path / "model.keras") as archive,
        archive.open("model.weights.h5") as file,
        h5py.File(file) as weights,
    ):
        assert not checkpoints._is_v0(weights)
    assert_close(checkpoints.load_model(tmp_path / "model.keras")((ids, ids)), logits, atol=0)
