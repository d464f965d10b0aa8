"""MultiHeadAttention: attention without residual or norm (`layers/multi_head_attention.py`)."""

import keras_transformer as kt
from tests.helpers import D, H, features, real_mask, run_layer_battery


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
