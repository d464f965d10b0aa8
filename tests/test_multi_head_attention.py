"""MultiHeadAttention: attention without residual or norm (`layers/multi_head_attention.py`)."""

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import D, H, assert_close, features, real_mask, run_layer_battery


@pytest.mark.half_precision
def test_multi_head_attention_battery():
    run_layer_battery(
        kt.layers.MultiHeadAttention,
        dict(num_heads=H, key_dim=D // H, output_dim=D),
        (features(),),
        dict(attention_mask=real_mask()[:, None, :]),
        # The output, and the attention weights (batch, heads, queries, keys).
        expected_shape=[(2, 5, D), (2, H, 5, 5)],
        # Query, key, value and output projections: a kernel and a bias each.
        expected_num_trainable_weights=4 * 2,
        dropout_rate_key="attention_dropout",
        # The weights come from a float32 softmax.
        mixed_precision_output_dtype=["bfloat16", "float32"],
    )


def test_padded_keys_are_masked_without_an_attention_mask():
    layer = kt.layers.MultiHeadAttention(H, D // H, D)
    x, mask = features(), real_mask()
    explicit, _ = layer(x, attention_mask=mask[:, None, :])
    assert_close(layer(x, query_mask=mask)[0], explicit)
    # The Keras mask the input carries (a PositionalEmbedding's output has one).
    masked = tf.convert_to_tensor(x)
    masked._keras_mask = tf.constant(mask)
    assert_close(layer(masked)[0], explicit)
    assert not np.allclose(layer(x)[0], explicit, atol=1e-3)
