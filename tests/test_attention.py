"""The attention sublayers (`layers/attention.py`): battery, hand-computed math, masks, cache."""

import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import (
    D,
    H,
    assert_close,
    assert_same_in_mode,
    features,
    real_mask,
    run_layer_battery,
)

# Each attention sublayer: query, key, value and output projections (a kernel
# and a bias each) and the layer norm's gamma and beta.
ATTENTION_WEIGHTS = 4 * 2 + 2


def test_global_self_attention_battery():
    run_layer_battery(
        kt.GlobalSelfAttention,
        dict(d_model=D, num_heads=H, dropout_rate=0.0),
        (features(),),
        dict(padding_mask=real_mask()),
        expected_shape=(2, 5, D),
        expected_num_trainable_weights=ATTENTION_WEIGHTS,
    )


def test_causal_self_attention_battery():
    run_layer_battery(
        kt.CausalSelfAttention,
        dict(d_model=D, num_heads=H, dropout_rate=0.0),
        (features(),),
        expected_shape=(2, 5, D),
        expected_num_trainable_weights=ATTENTION_WEIGHTS,
    )


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


def test_cached_causal_attention_equals_full_attention():
    layer = kt.CausalSelfAttention(d_model=D, num_heads=H, dropout_rate=0.0)
    x = features(length=6)
    # One position a step, through a cache longer than the sequence: the
    # empty positions must stay masked.
    assert_same_in_mode(layer, "cached", (x,), cache_steps=[1] * 6, cache_length=10, atol=1e-5)
    # Several positions at once from a non-zero index, too.
    assert_same_in_mode(layer, "cached", (x,), cache_steps=[2, 4], cache_length=10, atol=1e-5)


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
    with pytest.raises(ValueError, match="shape"):
        layer(np.zeros((3, D), "float32"))
