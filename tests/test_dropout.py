"""HashedDropout: the Keras dropout contract, with masks from an integer hash."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import HashedDropout
from keras_transformer.layers.dropout import hashed_keep_mask
from tests.helpers import assert_same_in_mode, run_layer_battery, tiny_transformer

RATE = 0.1


def keep_fraction(mask):
    return float(np.mean(np.asarray(mask)))


def test_outside_training_it_is_the_identity():
    x = np.random.default_rng(0).normal(size=(4, 5, 8)).astype("float32")
    layer = HashedDropout(0.5, seed=1)
    np.testing.assert_array_equal(layer(x), x)
    np.testing.assert_array_equal(layer(x, training=False), x)


def test_kept_values_are_scaled_and_the_rest_zeroed():
    x = np.random.default_rng(0).uniform(1.0, 2.0, size=(64, 32, 16)).astype("float32")
    y = np.asarray(HashedDropout(RATE, seed=1)(x, training=True))
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] / (1 - RATE), rtol=1e-6)
    assert 0.85 < kept.mean() < 0.95


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_drops_the_given_fraction(rate):
    # 2^20 elements: the binomial standard deviation of the kept fraction is < 0.0005.
    mask = hashed_keep_mask([1024, 1024], rate, tf.constant([7, 0], tf.int64))
    assert abs(keep_fraction(mask) - (1 - rate)) < 0.003


def test_neighbouring_elements_and_successive_masks_are_independent():
    # Both pairs must be kept together as often as two independent draws
    # would be: (1 - rate)^2. A hash that leaked its counter would not be.
    shape = [1024, 1024]
    first = np.asarray(hashed_keep_mask(shape, 0.5, tf.constant([3, 0], tf.int64))).ravel()
    second = np.asarray(hashed_keep_mask(shape, 0.5, tf.constant([3, 1], tf.int64))).ravel()
    other_layer = np.asarray(hashed_keep_mask(shape, 0.5, tf.constant([4, 0], tf.int64))).ravel()
    for a, b in [
        (first[:-1], first[1:]),
        (first[:-1024], first[1024:]),
        (first, second),
        (first, other_layer),
    ]:
        assert abs(np.mean(a & b) - 0.25) < 0.003


def test_every_call_draws_a_new_mask_and_a_seed_repeats_the_sequence():
    x = np.ones((32, 64), "float32")

    def two_masks(seed):
        layer = HashedDropout(0.5, seed=seed)
        return [np.asarray(layer(x, training=True)) != 0 for _ in range(2)]

    first, second = two_masks(seed=5)
    assert (first != second).mean() > 0.4
    again = two_masks(seed=5)
    np.testing.assert_array_equal(again[0], first)
    np.testing.assert_array_equal(again[1], second)


def test_the_mask_is_the_same_with_and_without_xla():
    # The mask is a pure function of (seed, position): XLA changes nothing.
    seed = tf.constant([11, 2], tf.int64)

    def mask():
        return hashed_keep_mask(tf.constant([8, 16, 32]), RATE, seed)

    np.testing.assert_array_equal(tf.function(mask, jit_compile=True)(), mask())


def test_gradient_is_the_mask_scaled():
    x = tf.ones((16, 32))
    layer = HashedDropout(RATE, seed=3)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    grad = tape.gradient(y, x)
    np.testing.assert_allclose(grad, np.where(np.asarray(y) != 0, 1 / (1 - RATE), 0), rtol=1e-6)


@pytest.mark.half_precision
def test_works_in_bfloat16():
    x = tf.ones((8, 16), tf.bfloat16)
    y = HashedDropout(RATE, seed=1, dtype="mixed_bfloat16")(x, training=True)
    assert y.dtype == tf.bfloat16


def test_config_round_trip_and_bad_arguments():
    layer = HashedDropout(0.2, seed=4, name="drop")
    clone = HashedDropout.from_config(layer.get_config())
    assert (clone.rate, clone.seed, clone.name) == (0.2, 4, "drop")
    with pytest.raises(ValueError, match="rate"):
        HashedDropout(1.5)
    with pytest.raises(ValueError, match="noise_shape"):
        HashedDropout(0.1, noise_shape=(None, 1))


@pytest.mark.half_precision
def test_hashed_dropout_battery():
    run_layer_battery(
        HashedDropout,
        dict(rate=RATE, seed=1),
        (np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32"),),
        expected_shape=(2, 5, 8),
        expected_num_trainable_weights=0,
        dropout_rate_key="rate",
    )


# The models here: dropout at both places a Transformer has it (sublayer outputs and
# attention weights), so that every dropout layer is a real one.
DROPOUT = dict(d_model=16, num_heads=2, dff=32, dropout_rate=0.1, attention_dropout=0.1)


def test_the_model_switch_reaches_every_dropout_and_survives_saving(tmp_path):
    model = tiny_transformer(**DROPOUT, hashed_dropout=True)
    dropouts = [
        layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dropout)
    ]
    # Encoder: embedding + 2 per attention + 1 feed-forward; decoder: embedding + 2 x 2 + 1.
    assert len(dropouts) == 10
    assert all(isinstance(layer, HashedDropout) for layer in dropouts)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.hashed_dropout
    context = np.array([[5, 6, 7, 0]])
    target = np.array([[2, 8, 9]])
    np.testing.assert_allclose(loaded((context, target)), model((context, target)), atol=1e-6)


def test_inference_does_not_depend_on_the_switch():
    context = np.array([[5, 6, 7, 0], [4, 4, 0, 0]])
    target = np.array([[2, 8, 9], [2, 5, 0]])
    # The model with hashed_dropout=True and the same weights gives the same logits.
    assert_same_in_mode(
        tiny_transformer(**DROPOUT), "hashed_dropout", ((context, target),), atol=1e-6
    )
