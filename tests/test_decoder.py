"""DecoderLayer and Decoder (`layers/decoder.py`), incremental decoding included."""

import numpy as np
import pytest

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


def test_decoder_layer_battery():
    run_layer_battery(
        kt.DecoderLayer,
        dict(d_model=D, num_heads=H, dff=DFF, dropout_rate=0.0),
        (features(length=3),),
        dict(context=features(seed=1), context_mask=real_mask()),
        expected_shape=(2, 3, D),
        expected_num_trainable_weights=DECODER_LAYER_WEIGHTS,
    )


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
def test_decoder_decode_step_equals_full_decoding(normalize_first):
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
    cache = decoder.init_cache(context, max_length=8)
    outputs = []
    for t in range(5):
        y, cache = decoder.decode_step(ids[:, t : t + 1], cache, t, context_mask=mask)
        outputs.append(y.numpy())
    assert_close(np.concatenate(outputs, axis=1), full, atol=1e-5)
