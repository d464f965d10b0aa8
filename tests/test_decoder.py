"""DecoderLayer and Decoder (`layers/decoder.py`), incremental decoding included."""

import keras
import numpy as np
import pytest
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

# CausalSelfAttention and CrossAttention (4 projections with kernel and bias,
# a layer norm's gamma and beta, each) and FeedForward (2 Dense, a layer norm).
DECODER_LAYER_WEIGHTS = 2 * (4 * 2 + 2) + (2 * 2 + 2)


@pytest.mark.half_precision
def test_decoder_layer_battery():
    run_layer_battery(
        kt.DecoderLayer,
        dict(d_model=D, num_heads=H, dff=DFF, dropout_rate=0.0),
        (features(length=3),),
        dict(context=features(seed=1), context_mask=real_mask()),
        expected_shape=(2, 3, D),
        expected_num_trainable_weights=DECODER_LAYER_WEIGHTS,
    )


@pytest.mark.half_precision
def test_decoder_battery():
    run_layer_battery(
        kt.Decoder,
        dict(num_layers=2, d_model=D, num_heads=H, dff=DFF, vocab_size=VOCAB, dropout_rate=0.0),
        (token_ids(2, 4, VOCAB, pad_tail=1), features(seed=1)),
        dict(context_mask=real_mask()),
        expected_shape=(2, 4, D),
        # The token table, then two blocks (post-LN: no final layer norm).
        expected_num_trainable_weights=1 + 2 * DECODER_LAYER_WEIGHTS,
    )


@pytest.mark.parametrize("normalize_first", [False, True])
def test_decoder_step_equals_full_decoding(normalize_first):
    decoder = kt.Decoder(
        num_layers=2,
        d_model=D,
        num_heads=H,
        dff=DFF,
        vocab_size=VOCAB,
        normalize_first=normalize_first,
    )
    ids, context, mask = token_ids(2, 5, VOCAB), features(seed=2), real_mask()
    full = decoder(ids, context, context_mask=mask).numpy()
    weights = decoder.step_weights()
    state = decoder.step_start(tf.convert_to_tensor(context), tf.convert_to_tensor(mask))
    outputs = []
    for t in range(5):
        y, state = decoder.step(tf.convert_to_tensor(ids[:, t]), t, weights, state)
        outputs.append(y.numpy())
    assert_close(np.stack(outputs, axis=1), full, atol=1e-5)


# -- the tutorial's way: no masks passed, `x=`, `last_attn_scores` ------------------------


def pad(ids, extra):
    return np.pad(ids, ((0, 0), (0, extra)))


def test_stacks_of_blocks_without_masks_ignore_padding():
    keras.utils.set_random_seed(5)
    embed_source, embed_target = kt.PositionalEmbedding(VOCAB, D), kt.PositionalEmbedding(VOCAB, D)
    encoder_blocks = [kt.EncoderLayer(D, H, DFF, dropout_rate=0.0) for _ in range(2)]
    decoder_blocks = [kt.DecoderLayer(D, H, DFF, dropout_rate=0.0) for _ in range(2)]

    def run(source, target, keep_context_mask=True):
        context = embed_source(source)
        for block in encoder_blocks:
            context = block(context)
        x = embed_target(target)
        for block in decoder_blocks:
            x = block(x, context if keep_context_mask else tf.identity(context))
        return np.asarray(x)

    source, target = token_ids(2, 6, VOCAB, seed=1), token_ids(2, 5, VOCAB, seed=2, pad_tail=1)
    source[1, 2:] = 0
    real = target != 0
    reference = run(source, target)
    for weights in (block.last_attn_scores.numpy() for block in decoder_blocks):
        assert np.all(weights.transpose(0, 3, 1, 2)[source == 0] == 0)
    for longer in (run(pad(source, 3), target), run(source, pad(target, 2))):
        assert_close(longer[:, :5][real], reference[real], atol=1e-5)
    # Without the context's mask (tf.identity drops it) the padded source is attended to.
    unmasked = run(pad(source, 3), target, keep_context_mask=False)
    assert not np.allclose(unmasked[real], reference[real], atol=1e-3)


def test_decoder_takes_the_tutorials_x_and_the_encoders_mask():
    sizes = dict(num_layers=2, d_model=D, num_heads=H, dff=DFF, vocab_size=VOCAB)
    encoder, decoder = kt.Encoder(**sizes), kt.Decoder(**sizes)
    source, target = token_ids(2, 6, VOCAB, seed=3, pad_tail=2), token_ids(2, 4, VOCAB, seed=4)
    explicit = decoder(target, encoder(source), context_mask=source != 0)
    assert_close(decoder(x=target, context=encoder(source)), explicit, atol=1e-6)
    assert_close(decoder(x=target, context=encoder(pad(source, 3))), explicit, atol=1e-5)
    assert decoder.last_attn_scores.shape == (2, H, 4, 9)
    assert_close(decoder.last_attn_scores, decoder.dec_layers[-1].last_attn_scores, atol=0)
    # Symbolic too: Keras gives `build` and the output shape the ids' shape, not the context's.
    ids = keras.Input(shape=(None,), dtype="int32")
    context = keras.Input(shape=(None, D))
    assert tuple(kt.Decoder(**sizes)(x=ids, context=context).shape) == (None, None, D)


def test_decoder_layer_keeps_the_cross_attention_weights_of_its_last_eager_call():
    layer = kt.DecoderLayer(D, H, DFF)
    _, weights = layer(features(length=3), features(seed=1), return_attention_scores=True)
    assert_close(layer.last_attn_scores, weights, atol=0)
    assert_close(layer.cross_attention.last_attn_scores, weights, atol=0)
