"""EncoderLayer and Encoder (`layers/encoder.py`)."""

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from tests.helpers import (
    DFF,
    VOCAB,
    D,
    H,
    assert_close,
    features,
    real_mask,
    run_layer_battery,
    token_ids,
)

# GlobalSelfAttention (4 projections with kernel and bias, a layer norm's
# gamma and beta) and FeedForward (2 Dense layers, a layer norm).
ENCODER_LAYER_WEIGHTS = (4 * 2 + 2) + (2 * 2 + 2)


def test_encoder_layer_battery():
    run_layer_battery(
        kt.EncoderLayer,
        dict(d_model=D, num_heads=H, dff=DFF, dropout_rate=0.0),
        (features(),),
        dict(padding_mask=real_mask()),
        expected_shape=(2, 5, D),
        expected_num_trainable_weights=ENCODER_LAYER_WEIGHTS,
    )


def test_encoder_battery():
    run_layer_battery(
        kt.Encoder,
        dict(num_layers=2, d_model=D, num_heads=H, dff=DFF, vocab_size=VOCAB, dropout_rate=0.0),
        (token_ids(2, 6, VOCAB, pad_tail=2),),
        expected_shape=(2, 6, D),
        # The token table, then two blocks (post-LN: no final layer norm).
        expected_num_trainable_weights=1 + 2 * ENCODER_LAYER_WEIGHTS,
    )


def test_pre_ln_encoder_battery():
    # Pre-LN stacks end with a layer norm of their own: its gamma and beta.
    run_layer_battery(
        kt.Encoder,
        dict(
            num_layers=1,
            d_model=D,
            num_heads=H,
            dff=DFF,
            vocab_size=VOCAB,
            dropout_rate=0.0,
            normalize_first=True,
        ),
        (token_ids(2, 6, VOCAB, pad_tail=2),),
        expected_shape=(2, 6, D),
        expected_num_trainable_weights=1 + ENCODER_LAYER_WEIGHTS + 2,
    )


def test_pre_ln_stacks_end_with_a_layer_norm():
    encoder = kt.Encoder(1, D, H, DFF, VOCAB, normalize_first=True, dropout_rate=0.0)
    out = encoder(token_ids(2, 5, VOCAB)).numpy()
    # A final LayerNorm with fresh weights leaves each position with mean 0 and variance 1.
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-4)
    np.testing.assert_allclose(out.var(-1), 1, atol=1e-2)
    assert kt.Encoder(1, D, H, DFF, VOCAB).final_layernorm is None


def test_layers_carry_the_dtype_policy_to_sublayers():
    layer = kt.EncoderLayer(D, H, DFF, dtype="mixed_bfloat16")
    out = layer(features())
    assert out.dtype == tf.bfloat16
    assert layer.self_attention.mha.query_dense.dtype_policy.name == "mixed_bfloat16"
    assert all(w.dtype == "float32" for w in layer.weights)
    assert keras.layers.deserialize(keras.layers.serialize(layer)).dtype_policy.name == (
        "mixed_bfloat16"
    )


def test_layers_compose_into_a_functional_model_with_explicit_masks():
    ids = keras.Input(shape=(None,), dtype="int32")
    mask = kt.layers.padding_mask(ids)
    x = kt.PositionalEmbedding(VOCAB, D)(ids)
    x = kt.EncoderLayer(D, H, DFF, dropout_rate=0.0)(x, padding_mask=mask)
    x = kt.EncoderLayer(D, H, DFF, dropout_rate=0.0)(x, padding_mask=mask)
    encoder = keras.Model(ids, x)
    real = token_ids(2, 5, VOCAB)
    padded = np.concatenate([real, np.zeros((2, 3), "int32")], axis=1)
    assert_close(encoder(padded)[:, :5], encoder(real), atol=1e-5)
