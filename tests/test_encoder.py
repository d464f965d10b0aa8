"""EncoderLayer and Encoder (`layers/encoder.py`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.layers import masks
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


@pytest.mark.half_precision
def test_encoder_layer_battery():
    run_layer_battery(
        kt.EncoderLayer,
        dict(d_model=D, num_heads=H, dff=DFF, dropout_rate=0.0),
        (features(),),
        dict(padding_mask=real_mask()),
        expected_shape=(2, 5, D),
        expected_num_trainable_weights=ENCODER_LAYER_WEIGHTS,
    )


@pytest.mark.half_precision
def test_encoder_battery():
    run_layer_battery(
        kt.Encoder,
        dict(num_layers=2, d_model=D, num_heads=H, dff=DFF, vocab_size=VOCAB, dropout_rate=0.0),
        (token_ids(2, 6, VOCAB, pad_tail=2),),
        expected_shape=(2, 6, D),
        # The token table, then two blocks (post-LN: no final layer norm).
        expected_num_trainable_weights=1 + 2 * ENCODER_LAYER_WEIGHTS,
    )


@pytest.mark.half_precision
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


@pytest.mark.half_precision
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


# -- the tutorial's way: no masks passed, the embedding's Keras mask reaches every layer -----


def test_stacked_layers_without_masks_ignore_padding():
    keras.utils.set_random_seed(4)
    embedding = kt.PositionalEmbedding(VOCAB, D)
    blocks = [kt.EncoderLayer(D, H, DFF, dropout_rate=0.0) for _ in range(2)]

    def stack(x):
        for block in blocks:
            x = block(x)
        return x

    ids = token_ids(2, 5, VOCAB)
    ids[1, 3:] = 0
    real = ids != 0
    reference = stack(embedding(ids))
    # Every block passes the mask on, so the second one masks padding too.
    np.testing.assert_array_equal(masks.keras_mask(reference), real)
    assert_close(stack(embedding(ids)), _explicit(blocks, embedding(ids), real))
    longer = np.asarray(stack(embedding(np.pad(ids, ((0, 0), (0, 3))))))[:, :5]
    assert_close(longer[real], np.asarray(reference)[real], atol=1e-5)
    # Without the mask (tf.identity drops it) padding is attended to: the mask does the work.
    unmasked = np.asarray(stack(tf.identity(embedding(np.pad(ids, ((0, 0), (0, 3)))))))[:, :5]
    assert not np.allclose(unmasked[real], np.asarray(reference)[real], atol=1e-3)

    # The same in a functional model.
    inputs = keras.Input(shape=(None,), dtype="int32")
    model = keras.Model(inputs, stack(embedding(inputs)))
    assert_close(np.asarray(model(np.pad(ids, ((0, 0), (0, 3)))))[:, :5][real], longer[real])


def _explicit(blocks, x, padding_mask):
    x = tf.identity(x)  # without its Keras mask
    for block in blocks:
        x = block(x, padding_mask=padding_mask)
    return x


def test_encoder_takes_the_tutorials_x_and_its_output_carries_the_mask():
    encoder = kt.Encoder(2, D, H, DFF, VOCAB)
    ids = token_ids(2, 6, VOCAB, pad_tail=2)
    output = encoder(x=ids)
    assert_close(output, encoder(ids), atol=0)
    np.testing.assert_array_equal(masks.keras_mask(output), ids != 0)
    with pytest.raises(ValueError, match="once, as `token_ids` or as `x`"):
        encoder(ids, x=ids)
