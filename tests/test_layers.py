"""Layer behaviour: the standard battery plus the math each layer must get right."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.layers.layer_norm import LayerNormalization
from tests.helpers import assert_close, dropout_reaches, run_layer_battery, token_ids

D, H, DFF, VOCAB = 16, 4, 32, 40


def features(batch=2, length=5, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, length, D)).astype("float32")


def real_mask(batch=2, length=5, pad_tail=2):
    mask = np.ones((batch, length), bool)
    mask[0, length - pad_tail :] = False
    return mask


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


def test_positional_embedding_battery():
    layer = run_layer_battery(
        kt.PositionalEmbedding,
        dict(vocab_size=VOCAB, d_model=D, max_length=64),
        (token_ids(2, 6, VOCAB),),
        expected_shape=(2, 6, D),
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


# -- attention -----------------------------------------------------------------


def test_global_self_attention_battery():
    run_layer_battery(
        kt.GlobalSelfAttention,
        dict(d_model=D, num_heads=H, dropout_rate=0.0),
        (features(),),
        dict(padding_mask=real_mask()),
        expected_shape=(2, 5, D),
    )
    dropout_reaches(kt.GlobalSelfAttention, dict(d_model=D, num_heads=H), (features(),))


def test_causal_self_attention_battery():
    run_layer_battery(
        kt.CausalSelfAttention,
        dict(d_model=D, num_heads=H, dropout_rate=0.0),
        (features(),),
        expected_shape=(2, 5, D),
    )
    dropout_reaches(kt.CausalSelfAttention, dict(d_model=D, num_heads=H), (features(),))


def test_cross_attention_battery():
    run_layer_battery(
        kt.CrossAttention,
        dict(d_model=D, num_heads=H, dropout_rate=0.0),
        (features(length=3), features(length=5, seed=1)),
        dict(context_mask=real_mask()),
        expected_shape=(2, 3, D),
    )
    dropout_reaches(
        kt.CrossAttention,
        dict(d_model=D, num_heads=H),
        (features(length=3), features(length=5, seed=1)),
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

    q, k, v = (dense(d, x[0]) for d in (layer.query_dense, layer.key_dense, layer.value_dense))
    size = 8 // num_heads
    heads = []
    for h in range(num_heads):
        cols = slice(h * size, (h + 1) * size)
        weights = _softmax(q[:, cols] @ k[:, cols].T / np.sqrt(size))
        heads.append(weights @ v[:, cols])
    attended = dense(layer.output_dense, np.concatenate(heads, axis=-1))
    residual = x[0] + attended
    mean, var = residual.mean(-1, keepdims=True), residual.var(-1, keepdims=True)
    gamma, beta = (w.numpy() for w in layer.layernorm.weights)
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
    full = layer(x).numpy()
    cache = layer.empty_cache(2, 10)
    steps = []
    for t in range(6):
        y, cache = layer(x[:, t : t + 1], cache=cache, cache_index=t)
        steps.append(y.numpy())
    assert_close(np.concatenate(steps, axis=1), full, atol=1e-5)
    # Several positions at once from a non-zero index, too.
    cache = layer.empty_cache(2, 10)
    _, cache = layer(x[:, :2], cache=cache, cache_index=0)
    y, _ = layer(x[:, 2:], cache=cache, cache_index=2)
    assert_close(y, full[:, 2:], atol=1e-5)


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


# -- feed-forward and blocks ---------------------------------------------------


def test_feed_forward_battery():
    layer = run_layer_battery(
        kt.FeedForward,
        dict(d_model=D, dff=DFF, dropout_rate=0.0),
        (features(),),
        expected_shape=(2, 5, D),
    )
    dropout_reaches(kt.FeedForward, dict(d_model=D, dff=DFF), (features(),))
    # Pre-LN keeps the residual path un-normalized.
    pre = kt.FeedForward(d_model=D, dff=DFF, dropout_rate=0.0, normalize_first=True)
    x = features()
    y = pre(x)
    hidden = pre.output_dense(pre.inner_dense(pre.layernorm(x)))
    assert_close(y, x + hidden)
    assert layer.get_config()["activation"] == "relu"


def test_feed_forward_activation_option():
    layer = kt.FeedForward(d_model=D, dff=DFF, activation="gelu")
    assert kt.FeedForward.from_config(layer.get_config()).get_config()["activation"] == "gelu"


def test_encoder_layer_battery():
    run_layer_battery(
        kt.EncoderLayer,
        dict(d_model=D, num_heads=H, dff=DFF, dropout_rate=0.0),
        (features(),),
        dict(padding_mask=real_mask()),
        expected_shape=(2, 5, D),
    )
    dropout_reaches(kt.EncoderLayer, dict(d_model=D, num_heads=H, dff=DFF), (features(),))


def test_decoder_layer_battery():
    run_layer_battery(
        kt.DecoderLayer,
        dict(d_model=D, num_heads=H, dff=DFF, dropout_rate=0.0),
        (features(length=3),),
        dict(context=features(seed=1), context_mask=real_mask()),
        expected_shape=(2, 3, D),
    )
    dropout_reaches(
        kt.DecoderLayer,
        dict(d_model=D, num_heads=H, dff=DFF),
        (features(length=3),),
        dict(context=features(seed=1)),
    )


def test_encoder_battery():
    run_layer_battery(
        kt.Encoder,
        dict(num_layers=2, d_model=D, num_heads=H, dff=DFF, vocab_size=VOCAB, dropout_rate=0.0),
        (token_ids(2, 6, VOCAB, pad_tail=2),),
        expected_shape=(2, 6, D),
    )
    dropout_reaches(
        kt.Encoder,
        dict(num_layers=1, d_model=D, num_heads=H, dff=DFF, vocab_size=VOCAB),
        (token_ids(2, 6, VOCAB),),
    )


def test_decoder_battery():
    run_layer_battery(
        kt.Decoder,
        dict(num_layers=2, d_model=D, num_heads=H, dff=DFF, vocab_size=VOCAB, dropout_rate=0.0),
        (token_ids(2, 4, VOCAB, pad_tail=1), features(seed=1)),
        dict(context_mask=real_mask()),
        expected_shape=(2, 4, D),
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
    assert layer.self_attention.query_dense.dtype_policy.name == "mixed_bfloat16"
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


# -- layer normalization ---------------------------------------------------------


@pytest.mark.parametrize("shape", [(7, D), (2, 5, D)])
def test_layer_norm_matches_keras_values_and_gradients(shape):
    # The hand-written gradient must be the derivative of Keras' layer norm.
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(3.0, 2.0, size=shape).astype("float32"))
    upstream = tf.constant(rng.normal(size=shape).astype("float32"))
    gamma, beta = rng.normal(size=(2, D)).astype("float32")
    results = []
    for layer in (LayerNormalization(epsilon=1e-5), keras.layers.LayerNormalization(epsilon=1e-5)):
        layer.build(shape)
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x) * upstream)
        results.append([layer(x), *tape.gradient(loss, [x, layer.gamma, layer.beta])])
    for got, want in zip(*results):
        assert_close(got, want, atol=1e-5)


def test_layer_norm_keeps_keras_weights_and_config():
    layer = LayerNormalization(epsilon=1e-5)
    layer.build((None, D))
    assert [w.name for w in layer.weights] == ["gamma", "beta"]
    assert LayerNormalization.from_config(layer.get_config()).epsilon == 1e-5
