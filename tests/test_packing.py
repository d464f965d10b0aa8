"""Packed tokens: every layer gives the real tokens the same values packed as padded.

A packed tensor holds only the real tokens' rows (`layers/packing.py`). For
each layer that accepts one, the packed output must equal the padded output at
the real positions, so the training step may run on packed tokens alone.
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.layers import packing
from tests.helpers import assert_close, assert_same_in_mode, ragged_mask

D, H, DFF, VOCAB = 16, 4, 32, 40


def features(batch=3, length=6, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, length, D)).astype("float32")


TARGET_MASK = ragged_mask([6, 2, 4], 6)
SOURCE_MASK = ragged_mask([3, 5, 1], 5)


def test_pack_and_unpack_round_trip():
    x = features()
    packed = packing.pack(x, TARGET_MASK)
    assert packed.shape == (TARGET_MASK.sum(), D)
    # Row-major order of the real tokens.
    assert_close(packed, x[TARGET_MASK])
    unpacked = packing.unpack(packed, TARGET_MASK)
    assert_close(unpacked, np.where(TARGET_MASK[..., None], x, 0.0))


@pytest.mark.parametrize("normalize_first", [False, True])
def test_self_attention_packed_equals_padded(normalize_first):
    for cls in (kt.GlobalSelfAttention, kt.CausalSelfAttention):
        layer = cls(d_model=D, num_heads=H, normalize_first=normalize_first)
        assert_same_in_mode(
            layer, "packed", (features(),), padding_mask=TARGET_MASK, gradients=True, atol=1e-5
        )


def test_cross_attention_packed_queries_and_context_equal_padded():
    layer = kt.CrossAttention(d_model=D, num_heads=H)
    x, context = features(), features(length=5, seed=1)
    for ctx in (context, packing.pack(context, SOURCE_MASK)):
        assert_same_in_mode(
            layer,
            "packed",
            (x,),
            dict(context=context, context_mask=SOURCE_MASK),
            mode_kwargs=dict(context=ctx),
            padding_mask=TARGET_MASK,
            gradients=True,
            atol=1e-5,
        )


def test_feed_forward_and_blocks_packed_equal_padded():
    x, context = features(), features(length=5, seed=1)
    ffn = kt.FeedForward(d_model=D, dff=DFF)
    assert_same_in_mode(ffn, "packed", (x,), padding_mask=TARGET_MASK, gradients=True, atol=1e-6)
    encoder_layer = kt.EncoderLayer(d_model=D, num_heads=H, dff=DFF)
    assert_same_in_mode(
        encoder_layer, "packed", (x,), padding_mask=TARGET_MASK, gradients=True, atol=1e-5
    )
    decoder_layer = kt.DecoderLayer(d_model=D, num_heads=H, dff=DFF)
    assert_same_in_mode(
        decoder_layer,
        "packed",
        (x,),
        dict(context=packing.pack(context, SOURCE_MASK), context_mask=SOURCE_MASK),
        padding_mask=TARGET_MASK,
        gradients=True,
        atol=1e-5,
    )


def test_encoder_and_decoder_packed_equal_padded():
    sizes = dict(num_layers=2, d_model=D, num_heads=H, dff=DFF, vocab_size=VOCAB)
    source = np.where(SOURCE_MASK, np.arange(1, 16).reshape(3, 5), 0)
    target = np.where(TARGET_MASK, np.arange(2, 20).reshape(3, 6), 0)
    encoder, decoder = kt.Encoder(**sizes), kt.Decoder(**sizes)
    packed_context = assert_same_in_mode(encoder, "packed", (source,), atol=1e-5).mode[0]
    # The packed decoder reads the packed encoder output; the padded one the padded output.
    assert_same_in_mode(
        decoder,
        "packed",
        (target,),
        dict(context=encoder(source), context_mask=SOURCE_MASK),
        mode_kwargs=dict(context=packed_context),
        atol=1e-5,
    )


def test_packed_input_needs_its_mask():
    packed = packing.pack(features(), TARGET_MASK)
    with pytest.raises(ValueError, match="padding_mask"):
        kt.GlobalSelfAttention(d_model=D, num_heads=H)(packed)
    with pytest.raises(ValueError, match="context_mask"):
        kt.CrossAttention(d_model=D, num_heads=H)(
            features(), context=packing.pack(features(length=5), SOURCE_MASK)
        )


def test_packing_runs_in_a_graph_with_unknown_shapes():
    # The training step traces once per batch shape; the token count is data-dependent.
    layer = kt.EncoderLayer(d_model=D, num_heads=H, dff=DFF)

    @tf.function(
        input_signature=[
            tf.TensorSpec((None, None, D), tf.float32),
            tf.TensorSpec((None, None), tf.bool),
        ]
    )
    def run(x, mask):
        return layer(packing.pack(x, mask), padding_mask=mask)

    x = features()
    assert_close(
        run(x, TARGET_MASK), np.asarray(layer(x, padding_mask=TARGET_MASK))[TARGET_MASK], atol=1e-5
    )
