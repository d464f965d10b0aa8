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


def test_traced_graphs_share_the_layer_s_one_position_table():
    """On TensorFlow every traced function captures the one table the layer keeps (so an
    export stores it once), and computes what the eager call does."""
    layer = kt.PositionalEmbedding(VOCAB, D, max_length=32)
    ids = token_ids(2, 8, VOCAB)
    traced = [tf.function(lambda x: layer(x)) for _ in range(2)]
    captured = [
        [t for t in f.get_concrete_function(ids).captured_inputs if t.shape == (32, D)]
        for f in traced
    ]
    assert len(captured[0]) == len(captured[1]) == 1 and captured[0][0] is captured[1][0]
    assert_close(traced[0](ids), layer(ids))


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


def test_the_fairseq_layout_is_fairseqs_formula():
    """M2M-100's and NLLB's table (transformers' `M2M100SinusoidalPositionalEmbedding`):
    sines then cosines of pos * exp(-i * log(10000) / (depth/2 - 1))."""
    depth = 8
    half = np.arange(depth // 2)
    angles = np.arange(20)[:, None] * np.exp(-half * np.log(10000) / (depth // 2 - 1))[None, :]
    expected = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    np.testing.assert_allclose(positional_encoding(20, depth, "fairseq"), expected, atol=1e-6)
    # The last frequency is exactly 1/10000, where the paper's stops short of it.
    assert not np.allclose(positional_encoding(20, depth, "halves"), expected, atol=1e-3)
    with pytest.raises(ValueError, match="learned"):
        positional_encoding(20, depth, "learned")  # a table, not a formula


@pytest.mark.parametrize("layout", ["fairseq", "learned"])
def test_offset_positions_and_the_embedding_norm_are_used_saved_and_stepped(layout):
    """Position t reads row t + offset; the layer norm follows the sum; the one-token
    step (decoding) computes what the call computes; the config round-trips."""
    layer = PositionalEmbedding(
        50, 8, max_length=10, position_layout=layout, position_offset=2, normalize=True
    )
    ids = np.array([[5, 6, 7, 0]])
    out = layer(ids).numpy()
    layer.layernorm.gamma.assign(np.linspace(0.5, 1.5, 8))
    layer.layernorm.beta.assign(np.linspace(-0.2, 0.2, 8))
    out = layer(ids).numpy()
    if layout == "learned":
        rows = layer.position_table.numpy()
        assert rows.shape == (12, 8)
        assert [w.path.split("/")[-1] for w in layer.trainable_weights].count(
            "position_embeddings"
        ) == 1
    else:
        rows = positional_encoding(12, 8, "fairseq")
    summed = layer.table.numpy()[ids[0]] * np.sqrt(8) + rows[2:6]
    mean, var = summed.mean(-1, keepdims=True), summed.var(-1, keepdims=True)
    expected = (summed - mean) / np.sqrt(var + 1e-5) * np.linspace(0.5, 1.5, 8)
    expected += np.linspace(-0.2, 0.2, 8)
    np.testing.assert_allclose(out[0], expected, atol=1e-5)
    weights = layer.step_weights()
    for t in range(4):
        step = layer.step(tf.constant(ids[:, t], tf.int64), t, weights)
        np.testing.assert_allclose(step.numpy()[0], out[0, t], atol=1e-5)
    config = layer.get_config()
    assert (config["position_offset"], config["normalize"]) == (2, True)
    with pytest.raises(ValueError, match="position_offset"):
        PositionalEmbedding(50, 8, position_offset=-1)


def test_shared_embeddings_with_stack_positions_share_the_token_table_only():
    """mBART: one token table, learned positions and an embedding norm per stack."""
    model = kt.Transformer(
        num_layers=1,
        d_model=8,
        num_heads=2,
        dff=16,
        input_vocab_size=30,
        target_vocab_size=30,
        max_length=16,
        share_embeddings=True,
        tie_embeddings=True,
        position_layout="learned",
        position_offset=2,
        embedding_layer_norm=True,
    )
    model((np.array([[4, 5, 0]]), np.array([[2, 6]])))
    encoder, decoder = model.encoder.embedding, model.decoder.embedding
    assert encoder is not decoder and encoder.embedding is decoder.embedding
    assert encoder.position_table is not decoder.position_table
    paths = [w.path for w in model.weights if "embedding/" in w.path]
    assert sum("token_embedding" in p for p in paths) == 1
    assert sum("position_embeddings" in p for p in paths) == 2
