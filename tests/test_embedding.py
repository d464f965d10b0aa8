"""PositionalEmbedding and the sinusoidal positional encoding (`layers/embedding.py`)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.layers import masks
from keras_transformer.layers.embedding import PositionalEmbedding, positional_encoding
from tests.helpers import VOCAB, D, assert_close, run_layer_battery, token_ids

# -- positional encoding -------------------------------------------------------


def test_positional_encoding_matches_paper_formula():
    pe = kt.positional_encoding(50, 8)
    for pos in (0, 1, 7, 49):
        for i in range(4):
            angle = pos / 10000 ** (2 * i / 8)
            assert pe[pos, 2 * i] == pytest.approx(np.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1] == pytest.approx(np.cos(angle), abs=1e-6)
    # Pinned values for depth 8: PE(1, 0) = sin(1), PE(1, 1) = cos(1), PE(1, 2) = sin(0.1).
    assert pe[1, 0] == pytest.approx(0.84147098, abs=1e-6)
    assert pe[1, 1] == pytest.approx(0.54030231, abs=1e-6)
    assert pe[1, 2] == pytest.approx(0.09983342, abs=1e-6)


def test_positional_encoding_rows_have_constant_norm():
    pe = kt.positional_encoding(200, 64)
    np.testing.assert_allclose(np.linalg.norm(pe, axis=1), np.sqrt(32), atol=1e-4)


@pytest.mark.parametrize("k", [1, 5, 17])
def test_positional_encoding_shift_is_a_fixed_rotation(k):
    depth = 16
    pe = kt.positional_encoding(100, depth).astype("float64")
    # Block-diagonal rotation by the angle k * w_i on each (sin, cos) pair.
    rotation = np.zeros((depth, depth))
    for i in range(depth // 2):
        w = k / 10000 ** (2 * i / depth)
        c, s = np.cos(w), np.sin(w)
        # sin(a + b) = sin a cos b + cos a sin b; cos(a + b) = cos a cos b - sin a sin b
        rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    shifted = pe[:-k] @ rotation.T
    np.testing.assert_allclose(shifted, pe[k:], atol=1e-5)


def test_positional_encoding_rejects_odd_depth():
    with pytest.raises(ValueError, match="depth"):
        kt.positional_encoding(10, 7)


# -- PositionalEmbedding -------------------------------------------------------


@pytest.mark.half_precision
def test_positional_embedding_battery():
    layer = run_layer_battery(
        kt.PositionalEmbedding,
        dict(vocab_size=VOCAB, d_model=D, max_length=64),
        (token_ids(2, 6, VOCAB),),
        expected_shape=(2, 6, D),
        expected_num_trainable_weights=1,  # the token table; the encoding is a constant
        dropout_rate_key=None,
    )
    # Scaled by sqrt(d_model), plus the encoding.
    ids = token_ids(1, 6, VOCAB)
    table = layer.embedding.embeddings.numpy()
    expected = table[ids[0]] * np.sqrt(D) + kt.positional_encoding(64, D)[:6]
    assert_close(layer(ids)[0], expected)


def test_positional_embedding_start_position_continues_the_sequence():
    layer = kt.PositionalEmbedding(VOCAB, D, max_length=32)
    ids = token_ids(2, 8, VOCAB)
    assert_close(layer(ids[:, 5:6], start_position=5), layer(ids)[:, 5:6])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(vocab_size=VOCAB, d_model=15), "even"),
        (dict(vocab_size=0, d_model=16), "vocab_size"),
        (dict(vocab_size=VOCAB, d_model=16, max_length=-1), "max_length"),
    ],
)
def test_positional_embedding_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        kt.PositionalEmbedding(**kwargs)


def test_positional_embedding_rejects_overlong_and_malformed_input():
    layer = kt.PositionalEmbedding(VOCAB, D, max_length=4)
    with pytest.raises(ValueError, match="max_length=4"):
        layer(token_ids(1, 5, VOCAB))
    with pytest.raises(ValueError, match="integer"):
        layer(np.zeros((1, 3), "float32"))
    with pytest.raises(ValueError, match="shape"):
        layer(np.zeros((3,), "int32"))
    # Inside a graph with an unknown length the check happens at run time.
    fn = tf.function(layer, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_length=4"):
        fn(token_ids(1, 5, VOCAB))


def test_positional_embedding_output_carries_the_padding_mask():
    layer = kt.PositionalEmbedding(VOCAB, D)
    ids = token_ids(2, 5, VOCAB, pad_tail=2)
    np.testing.assert_array_equal(masks.keras_mask(layer(ids)), ids != 0)
    symbolic = layer(keras.Input(shape=(None,), dtype="int32"))
    assert masks.keras_mask(symbolic) is not None


@pytest.mark.parametrize("integer", [np.int32(40), np.int64(40), np.array(40), tf.constant(40)])
def test_sizes_accept_any_integer_type(integer):
    # Sizes from tokenizers are numpy ints: `tokenizers.pt.get_vocab_size().numpy()`.
    layer = kt.PositionalEmbedding(vocab_size=integer, d_model=D)
    assert layer.get_config()["vocab_size"] == 40
    json.dumps(layer.get_config())  # stored as a Python int
    assert kt.positional_encoding(integer, D).shape == (40, D)


@pytest.mark.parametrize("value", [40.0, np.float32(40), tf.constant(40.0), True, "40", 0, -3])
def test_sizes_refuse_floats_booleans_and_non_positive_values(value):
    with pytest.raises(ValueError, match="vocab_size"):
        kt.PositionalEmbedding(vocab_size=value, d_model=D)


def test_the_halves_layout_holds_the_paper_values_sines_first():
    interleaved = positional_encoding(20, 8)
    halves = positional_encoding(20, 8, layout="halves")
    np.testing.assert_array_equal(halves[:, :4], interleaved[:, 0::2])
    np.testing.assert_array_equal(halves[:, 4:], interleaved[:, 1::2])
    with pytest.raises(ValueError, match="position_layout"):
        positional_encoding(20, 8, layout="mixed")


def test_embedding_scale_and_layout_are_used_and_saved():
    layer = PositionalEmbedding(50, 8, embedding_scale=1.0, position_layout="halves")
    ids = np.array([[5, 6, 0]])
    out = layer(ids).numpy()
    table = layer.table.numpy()
    expected = table[ids[0]] + positional_encoding(3, 8, layout="halves")
    np.testing.assert_allclose(out[0], expected, atol=1e-6)
    config = layer.get_config()
    assert (config["embedding_scale"], config["position_layout"]) == (1.0, "halves")
    assert PositionalEmbedding.from_config(config).scale == 1.0
    assert PositionalEmbedding(50, 16).scale == 4.0
    with pytest.raises(ValueError, match="embedding_scale"):
        PositionalEmbedding(50, 8, embedding_scale=0)
