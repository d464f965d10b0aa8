"""The attention sublayers (`layers/attention.py`): battery, hand-computed math, masks, cache,
and the tutorial's ways: keras.layers.MultiHeadAttention's arguments, Keras masks."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.layers import masks
from tests.helpers import (
    VOCAB,
    D,
    H,
    assert_close,
    assert_same_in_mode,
    features,
    real_mask,
    run_layer_battery,
    token_ids,
)

# Each attention sublayer: query, key, value and output projections (a kernel
# and a bias each) and the layer norm's gamma and beta.
ATTENTION_WEIGHTS = 4 * 2 + 2


@pytest.mark.half_precision
def test_global_self_attention_battery():
    run_layer_battery(
        kt.GlobalSelfAttention,
        dict(d_model=D, num_heads=H, dropout_rate=0.0),
        (features(),),
        dict(padding_mask=real_mask()),
        expected_shape=(2, 5, D),
        expected_num_trainable_weights=ATTENTION_WEIGHTS,
    )


@pytest.mark.half_precision
def test_causal_self_attention_battery():
    run_layer_battery(
        kt.CausalSelfAttention,
        dict(d_model=D, num_heads=H, dropout_rate=0.0),
        (features(),),
        expected_shape=(2, 5, D),
        expected_num_trainable_weights=ATTENTION_WEIGHTS,
    )


@pytest.mark.half_precision
def test_cross_attention_battery():
    run_layer_battery(
        kt.CrossAttention,
        dict(d_model=D, num_heads=H, dropout_rate=0.0),
        (features(length=3), features(length=5, seed=1)),
        dict(context_mask=real_mask()),
        expected_shape=(2, 3, D),
        expected_num_trainable_weights=ATTENTION_WEIGHTS,
    )


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("num_heads", [1, 2])
def test_attention_matches_hand_computation(num_heads):
    layer = kt.GlobalSelfAttention(d_model=8, num_heads=num_heads, dropout_rate=0.0)
    x = np.random.default_rng(3).normal(size=(1, 4, 8)).astype("float32")
    y = layer(x).numpy()

    def dense(layer_, inputs):
        kernel, bias = (w.numpy() for w in layer_.weights)
        return inputs @ kernel + bias

    mha = layer.mha
    q, k, v = (dense(d, x[0]) for d in (mha.query_dense, mha.key_dense, mha.value_dense))
    size = 8 // num_heads
    heads = []
    for h in range(num_heads):
        cols = slice(h * size, (h + 1) * size)
        weights = _softmax(q[:, cols] @ k[:, cols].T / np.sqrt(size))
        heads.append(weights @ v[:, cols])
    attended = dense(mha.output_dense, np.concatenate(heads, axis=-1))
    residual = x[0] + attended
    mean, var = residual.mean(-1, keepdims=True), residual.var(-1, keepdims=True)
    gamma, beta = (w.numpy() for w in layer.residual.layernorm.weights)
    expected = (residual - mean) / np.sqrt(var + layer.layer_norm_epsilon) * gamma + beta
    np.testing.assert_allclose(y[0], expected, atol=1e-4)


def test_attention_gives_padded_keys_zero_weight():
    layer = kt.GlobalSelfAttention(d_model=D, num_heads=H)
    mask = real_mask(pad_tail=2)
    _, weights = layer(features(), padding_mask=mask, return_attention_scores=True)
    weights = weights.numpy()
    assert weights.shape == (2, H, 5, 5)
    assert np.all(weights[0, :, :, 3:] == 0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)


def test_causal_attention_weights_are_lower_triangular():
    layer = kt.CausalSelfAttention(d_model=D, num_heads=H)
    _, weights = layer(features(), return_attention_scores=True)
    upper = np.triu(np.ones((5, 5), bool), k=1)
    assert np.all(weights.numpy()[:, :, upper] == 0)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_causal_attention_step_equals_full_attention(normalize_first):
    layer = kt.CausalSelfAttention(
        d_model=D, num_heads=H, dropout_rate=0.0, normalize_first=normalize_first
    )
    x = features(length=6)
    # One position a step, through a cache that grows a position a step.
    assert_same_in_mode(layer, "cached", (x,), atol=1e-5)
    # Through a cache of more slots than the sequence: the slots after the step stay masked.
    assert_same_in_mode(layer, "cached", (x,), cache_slots=10, atol=1e-5)


def test_cross_attention_with_precomputed_keys_values_is_the_same():
    layer = kt.CrossAttention(d_model=D, num_heads=H)
    x, context, mask = features(length=3), features(seed=1), real_mask()
    full = layer(x, context=context, context_mask=mask)
    key_value = layer.project_key_value(context)
    assert_close(layer(x, context_key_value=key_value, context_mask=mask), full)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(d_model=10, num_heads=4), "divisible"),
        (dict(d_model=0, num_heads=1), "d_model"),
        (dict(d_model=8, num_heads=0), "num_heads"),
        (dict(d_model=8, num_heads=2, dropout_rate=1.5), "dropout_rate"),
    ],
)
def test_attention_rejects_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        kt.GlobalSelfAttention(**kwargs)


def test_attention_rejects_wrong_feature_size_and_rank():
    layer = kt.GlobalSelfAttention(d_model=D, num_heads=H)
    with pytest.raises(ValueError, match="d_model=16"):
        layer(np.zeros((1, 3, 8), "float32"))
    with pytest.raises(ValueError, match=r"must have shape \(batch, length, d_model\)"):
        layer(np.zeros((1, 3, D, 1), "float32"))


# -- the tutorial's construction: keras.layers.MultiHeadAttention's arguments ----------------


@pytest.mark.half_precision
def test_cross_attention_battery_built_from_key_dim():
    # As the tutorial builds it: heads of `key_dim`, the width of the input, and
    # `dropout` on the attention weights (the battery's dropout check uses it).
    layer = run_layer_battery(
        kt.CrossAttention,
        dict(num_heads=H, key_dim=8),
        (features(length=3), features(length=5, seed=1)),
        dict(context_mask=real_mask()),
        expected_shape=(2, 3, D),
        expected_num_trainable_weights=ATTENTION_WEIGHTS,
        dropout_rate_key="dropout",
    )
    assert layer.mha.key_dim == 8 and layer.mha.query_dense.kernel.shape == (D, H * 8)
    assert layer.dropout_rate == 0.0  # keras.layers.MultiHeadAttention has no output dropout


@pytest.mark.parametrize("cls", [kt.GlobalSelfAttention, kt.CausalSelfAttention])
def test_self_attention_built_from_key_dim_follows_the_input_width(cls):
    layer = cls(num_heads=2, key_dim=5, dropout=0.2)
    assert layer(features()).shape == (2, 5, D)
    assert layer.head_size == 5 and layer.attention_dropout == 0.2
    assert layer.mha.output_dense.kernel.shape == (2 * 5, D)
    # The paper's form gives the same layer when key_dim is d_model // num_heads.
    paper = cls(d_model=D, num_heads=2, key_dim=D // 2)
    assert paper.head_size == D // 2 and paper.dropout_rate == 0.1


@pytest.mark.parametrize(
    "kwargs, names",
    [
        (dict(num_heads=2), ("d_model", "key_dim")),
        (dict(d_model=D, num_heads=2, key_dim=4), ("d_model", "key_dim")),
        (
            dict(num_heads=2, key_dim=4, dropout=0.1, attention_dropout=0.1),
            ("dropout", "attention_dropout"),
        ),
        (dict(num_heads=2, key_dim=0), ("key_dim",)),
        (dict(num_heads=2.0, key_dim=4), ("num_heads",)),
        (dict(num_heads=2, key_dim=4, dropout=1.5), ("dropout",)),
    ],
)
def test_wrong_combinations_name_the_arguments(kwargs, names):
    with pytest.raises(ValueError) as error:
        kt.CrossAttention(**kwargs)
    assert all(f"`{name}`" in str(error.value) for name in names), str(error.value)


def test_sizes_accept_numpy_and_tensor_integers():
    layer = kt.GlobalSelfAttention(d_model=np.int64(D), num_heads=tf.constant(H))
    config = layer.get_config()
    assert config["d_model"] == D and type(config["d_model"]) is int
    assert type(config["num_heads"]) is int
    json.dumps(config)  # what a .keras file stores


# -- Keras masks: the tutorial calls the layers without explicit masks ----------------------


def padded_ids(length, seed=0):
    """Ids with padding at the end of both rows (of different lengths) and inside row 0,
    where even causal attention would see it."""
    ids = token_ids(2, length, VOCAB, seed=seed, pad_tail=2)
    ids[1, length - 3] = 0
    ids[0, 1] = 0
    return ids


@pytest.mark.parametrize("cls", [kt.GlobalSelfAttention, kt.CausalSelfAttention])
def test_self_attention_uses_the_keras_mask_of_its_input(cls):
    keras.utils.set_random_seed(1)
    embedding = kt.PositionalEmbedding(VOCAB, D)
    layer = cls(d_model=D, num_heads=H, dropout_rate=0.0)
    ids = padded_ids(6)
    real = ids != 0
    x = embedding(ids)
    implicit = layer(x)
    assert_close(implicit, layer(tf.identity(x), padding_mask=real))  # tf.identity: no mask
    assert not np.allclose(implicit, layer(tf.identity(x)), atol=1e-3)
    # More padding changes nothing at the real positions.
    longer = layer(embedding(np.pad(ids, ((0, 0), (0, 3)))))
    assert_close(np.asarray(longer)[:, :6][real], np.asarray(implicit)[real])
    # The output carries the mask on, and an explicit mask wins over it.
    np.testing.assert_array_equal(masks.keras_mask(implicit), real)
    everything = np.ones_like(real)
    assert_close(layer(x, padding_mask=everything), layer(tf.identity(x)))


def test_cross_attention_uses_the_keras_mask_of_its_context():
    keras.utils.set_random_seed(2)
    embedding = kt.PositionalEmbedding(VOCAB, D)
    layer = kt.CrossAttention(num_heads=2, key_dim=8)
    queries, source = features(length=3), padded_ids(6)
    context = embedding(source)
    implicit = layer(queries, context)
    assert np.all(layer.last_attn_scores.numpy().transpose(0, 3, 1, 2)[source == 0] == 0)
    assert_close(implicit, layer(queries, tf.identity(context), context_mask=source != 0))
    assert not np.allclose(implicit, layer(queries, tf.identity(context)), atol=1e-3)
    assert_close(layer(queries, embedding(np.pad(source, ((0, 0), (0, 4))))), implicit)


def test_cross_attention_keeps_the_weights_of_its_last_eager_call():
    layer = kt.CrossAttention(d_model=D, num_heads=H)
    x, context = features(length=3), features(seed=1)
    _, weights = layer(x, context, return_attention_scores=True)
    assert_close(layer.last_attn_scores, weights, atol=0)
    # A traced call leaves them alone: its tensors are symbolic.
    tf.function(layer)(features(length=4), context)
    assert layer.last_attn_scores.shape == (2, H, 3, 5)
