"""Checkpoints written by earlier versions still load, with the same outputs."""

import tempfile
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.training import checkpoints, run_dir
from tests.helpers import BFLOAT16_ATOL, assert_close, tiny_transformer

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
    model = tiny_transformer()
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


def test_average_is_the_mean_of_the_weights(tmp_path):
    paths, weights = [], []
    for seed in range(3):
        model = tiny_transformer(seed=seed)
        paths.append(tmp_path / f"epoch_{seed + 1:04d}.keras")
        model.save(paths[-1])
        weights.append([w.numpy() for w in model.weights])
    averaged = checkpoints.average(paths)
    for i, weight in enumerate(averaged.weights):
        expected = np.mean([w[i] for w in weights], axis=0)
        assert_close(weight, expected, atol=1e-7)


def test_run_directory_averages_its_last_epochs_or_says_why_not(tmp_path):
    weights = []
    for epoch in (1, 2, 3):
        model = tiny_transformer(seed=epoch)
        path = run_dir.epoch_checkpoint(tmp_path, epoch)
        path.parent.mkdir(exist_ok=True)
        model.save(path)
        weights.append([w.numpy() for w in model.weights])
    averaged = run_dir.load_model(tmp_path, average_last=2)
    # The mean of epochs 2 and 3, computed here, not by the code under test.
    assert len(averaged.weights) == len(weights[0])
    for i, weight in enumerate(averaged.weights):
        assert_close(weight, (weights[1][i] + weights[2][i]) / 2, atol=1e-7)
    with pytest.raises(ValueError, match="keeps 3 epoch checkpoints"):
        run_dir.load_model(tmp_path, average_last=4)


@pytest.mark.half_precision
@pytest.mark.parametrize("shared", [False, True], ids=["separate", "shared_embeddings"])
def test_a_mixed_precision_run_loads_computing_in_float32_with_the_same_weights(tmp_path, shared):
    # An export of a run trained under mixed_bfloat16 must not decode in bfloat16.
    options = dict(share_embeddings=True, tie_embeddings=True) if shared else {}
    trained = tiny_transformer(dtype="mixed_bfloat16", vocab_size=20, **options)
    path = run_dir.epoch_checkpoint(tmp_path, 1)
    path.parent.mkdir()
    trained.save(path)
    trained.save(tmp_path / run_dir.BEST_CHECKPOINT)
    reference = tiny_transformer(seed=1, vocab_size=20, **options)  # float32, other weights
    reference.set_weights(trained.get_weights())
    ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]])
    for model in (run_dir.load_model(tmp_path), run_dir.load_model(tmp_path, average_last=1)):
        # _flatten_layers: Keras has no public recursive list of a subclassed model's layers.
        assert {layer.compute_dtype for layer in model._flatten_layers()} == {"float32"}
        assert [w.path for w in model.weights] == [w.path for w in trained.weights]
        for loaded, kept in zip(model.weights, trained.weights, strict=True):
            assert_close(loaded, kept, atol=0)
        assert_close(model((ids, ids)), reference((ids, ids)), atol=0)
        assert_close(model((ids, ids)), trained((ids, ids)), atol=BFLOAT16_ATOL)
    assert run_dir.load_model(tmp_path, dtype=None).compute_dtype == "bfloat16"


@pytest.mark.half_precision
def test_a_policy_that_would_round_the_weights_is_refused():
    with pytest.raises(ValueError, match="would round them"):
        checkpoints.with_dtype(tiny_transformer(), "bfloat16")


@pytest.mark.half_precision
def test_rounding_to_bfloat16_is_asked_for_and_rounds_each_weight_to_nearest():
    """`round_weights=True` (a bfloat16 export) gives a copy whose every weight is the
    model's rounded to the nearest bfloat16, computing in bfloat16 near float32's logits."""
    model = tiny_transformer(vocab_size=20)
    rounded = checkpoints.with_dtype(model, "bfloat16", round_weights=True)
    assert rounded.compute_dtype == "bfloat16" and model.compute_dtype == "float32"
    nearest = tf.bfloat16.as_numpy_dtype  # numpy's cast to it rounds to nearest, ties to even
    for kept, weight in zip(model.weights, rounded.weights, strict=True):
        assert weight.path == kept.path and weight.dtype == "bfloat16"
        np.testing.assert_array_equal(
            np.asarray(weight.numpy()).astype(np.float32),
            kept.numpy().astype(nearest).astype(np.float32),
        )
    ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]])
    assert_close(rounded((ids, ids)), model((ids, ids)), atol=BFLOAT16_ATOL)


def test_save_checkpoint_writes_the_archive_keras_writes_and_loads_it_back(tmp_path):
    """A checkpoint is saved through a directory (its weights straight to disk) and
    zipped; it holds the members `model.save` writes, loads with Keras' own loader
    and ours to the same logits, and leaves no scratch directory beside it."""
    model = tiny_transformer()
    ids = np.array([[5, 6, 7, 0]])
    logits = model((ids, ids))
    path = checkpoints.save_checkpoint(model, tmp_path / "best.keras", epoch=3)
    model.save(tmp_path / "keras.keras")
    with zipfile.ZipFile(path) as ours, zipfile.ZipFile(tmp_path / "keras.keras") as keras_own:
        assert sorted(ours.namelist()) == sorted(keras_own.namelist() + [checkpoints.RECORD_FILE])
        assert all(info.compress_type == zipfile.ZIP_STORED for info in ours.infolist())
    assert checkpoints.read_record(path) == {"epoch": 3}
    assert_close(checkpoints.load_model(path)((ids, ids)), logits, atol=0)
    import keras

    assert_close(keras.models.load_model(path)((ids, ids)), logits, atol=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.keras", "keras.keras"]


def test_a_checkpoint_in_a_read_only_directory_loads(tmp_path, monkeypatch):
    """Loading unzips into a scratch directory beside the checkpoint, or into the system's
    temporary directory where the checkpoint's cannot be written (as here, for every
    user: a directory made read-only does not stop root)."""
    model = tiny_transformer()
    ids = np.array([[5, 6, 7, 0]])
    path = checkpoints.save_checkpoint(model, tmp_path / "run" / "best.keras")
    made, original = [], tempfile.TemporaryDirectory

    def temporary_directory(dir=None, **kwargs):
        if dir is not None:
            raise PermissionError(f"[Errno 13] Permission denied: {dir!r}")
        made.append(original(**kwargs))
        return made[-1]

    monkeypatch.setattr(checkpoints.tempfile, "TemporaryDirectory", temporary_directory)
    assert_close(checkpoints.load_model(path)((ids, ids)), model((ids, ids)), atol=0)
    assert len(made) == 1 and not Path(made[0].name).exists()
    assert [p.name for p in path.parent.iterdir()] == ["best.keras"]
