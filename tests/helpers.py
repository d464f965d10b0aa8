"""Shared test helpers: the standard battery every layer must pass."""

import keras
import numpy as np
import tensorflow as tf


def assert_close(a, b, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol, rtol=0)


def ragged_mask(lengths, length):
    """Right-padded rows of the given real lengths (one row may be full, one nearly empty)."""
    return np.arange(length)[None, :] < np.array(lengths)[:, None]


def token_ids(batch, length, vocab_size, seed=0, pad_tail=0):
    """Random non-padding ids in [1, vocab_size) with `pad_tail` trailing zeros per row."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab_size, size=(batch, length)).astype("int32")
    if pad_tail:
        ids[:, length - pad_tail :] = 0
    return ids


def run_layer_battery(layer_cls, init_kwargs, call_args, call_kwargs=None, expected_shape=None):
    """Config round trip, serialization, eager/symbolic calls, a fit step, dropout flag.

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments.
        call_args: tuple of numpy inputs for the positional call arguments.
        call_kwargs: dict of numpy keyword call inputs (masks).
        expected_shape: output shape of the eager call.
    """
    call_kwargs = call_kwargs or {}
    layer = layer_cls(**init_kwargs)
    eager = layer(*call_args, **call_kwargs)
    if expected_shape is not None:
        assert tuple(eager.shape) == tuple(expected_shape)

    # Config round trip gives the same config; serialization needs no custom_objects.
    config = layer.get_config()
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is layer_cls
    assert restored.get_config() == config

    # Symbolic (functional) call, then one fit step on that functional model.
    inputs = [keras.Input(shape=a.shape[1:], dtype=str(a.dtype)) for a in call_args]
    kw_inputs = {
        k: keras.Input(shape=v.shape[1:], dtype=str(v.dtype)) for k, v in call_kwargs.items()
    }
    outputs = layer(*inputs, **kw_inputs)
    model = keras.Model(inputs + list(kw_inputs.values()), outputs)
    feed = list(call_args) + list(call_kwargs.values())
    model.compile(optimizer="sgd", loss="mse")
    before = [w.numpy().copy() for w in layer.trainable_weights]
    model.fit(feed, np.asarray(eager) + 1.0, epochs=1, batch_size=len(call_args[0]), verbose=0)
    after = [w.numpy() for w in layer.trainable_weights]
    assert any(not np.allclose(b, a) for b, a in zip(before, after)), "fit changed no weight"
    assert_close(model(feed), layer(*call_args, **call_kwargs), atol=1e-5)
    return layer


def dropout_reaches(layer_cls, init_kwargs, call_args, call_kwargs=None, rate_key="dropout_rate"):
    """With dropout ~1, training=True must change the output; training=False must not."""
    kwargs = dict(init_kwargs, **{rate_key: 0.99999})
    layer = layer_cls(**kwargs)
    call_kwargs = call_kwargs or {}
    inference_1 = layer(*call_args, training=False, **call_kwargs)
    inference_2 = layer(*call_args, training=False, **call_kwargs)
    training = layer(*call_args, training=True, **call_kwargs)
    assert_close(inference_1, inference_2, atol=0)
    assert not np.allclose(np.asarray(inference_1), np.asarray(training), atol=1e-3)


def set_seed(seed=0):
    keras.utils.set_random_seed(seed)
    tf.random.set_seed(seed)
