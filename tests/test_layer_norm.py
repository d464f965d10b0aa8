"""LayerNormalization with its hand-written gradient (`layers/layer_norm.py`)."""

import gc
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers.layer_norm import LayerNormalization
from tests.helpers import D, assert_close, features, run_layer_battery


@pytest.mark.half_precision
def test_layer_norm_battery():
    run_layer_battery(
        LayerNormalization,
        dict(epsilon=1e-5),
        (features(),),
        expected_shape=(2, 5, D),
        expected_num_trainable_weights=2,  # gamma and beta
        dropout_rate_key=None,
    )


@pytest.mark.parametrize("shape", [(7, D), (2, 5, D)])
@pytest.mark.parametrize("training", [True, False])
def test_layer_norm_matches_keras_values_and_gradients(shape, training):
    # Training calls use the hand-written gradient, which must be the derivative of
    # Keras' layer norm; other calls differentiate the same forward automatically.
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
            loss = tf.reduce_sum(layer(x, training=training) * upstream)
        results.append([layer(x), *tape.gradient(loss, [x, layer.gamma, layer.beta])])
    # float32 rounding of two orders of the same sums, on inputs of scale 3 +- 2.
    for got, want in zip(*results):
        assert_close(got, want, atol=1e-5)


def test_inference_calls_leave_no_graph_behind():
    """A traced call outside training registers no gradient in TensorFlow's global
    registry, which would hold the traced graph until the process ends."""
    layer = LayerNormalization(epsilon=1e-5)
    layer.build((None, D))
    traced = tf.function(layer).get_concrete_function(tf.TensorSpec((None, D), tf.float32))
    graph = weakref.ref(traced.graph)
    del traced
    gc.collect()
    assert graph() is None


def test_layer_norm_keeps_keras_weights_and_config():
    layer = LayerNormalization(epsilon=1e-5)
    layer.build((None, D))
    assert [w.name for w in layer.weights] == ["gamma", "beta"]
    assert LayerNormalization.from_config(layer.get_config()).epsilon == 1e-5


def test_keras_rms_form_is_left_to_keras():
    # Keras' deprecated `rms_scaling=True` builds gamma without beta: Keras computes it.
    layer = LayerNormalization(epsilon=1e-5, rms_scaling=True)
    x = features()
    want = keras.layers.LayerNormalization(epsilon=1e-5, rms_scaling=True)(x)
    assert_close(layer(x, training=True), want, atol=1e-6)
