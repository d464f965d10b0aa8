"""Layer normalization over the last axis, with its gradient written out (on TensorFlow)."""

import keras

from keras_transformer.layers import backend

if backend.WRITTEN_OUT_LAYER_NORM_GRADIENT:
    import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` with a hand-written backward pass.

    The same weights (`gamma`, `beta`), config and outputs. Automatic
    differentiation of Keras' layer norm builds its backward pass from the
    forward's moments, broadcasts and tiles, about twenty small ops per call;
    a Transformer step runs dozens of layer norms on small tensors, where op
    count, not arithmetic, sets the cost. The gradient here is the closed form
    (five elementwise ops and three row reductions). Layer norms over other
    axes, without both `gamma` and `beta`, or RMS-scaled, use Keras' own
    computation, and so do JAX and PyTorch, whose compilers fuse the automatic gradient
    (`backend.WRITTEN_OUT_LAYER_NORM_GRADIENT`).

    The written-out gradient is attached in training calls only (`training=True`:
    `fit` calls the model so, and Keras passes it on to each layer). Elsewhere the
    layer computes the same forward ops without it, and gradients, where someone
    takes them, come from automatic differentiation. The reason is memory:
    `tf.custom_gradient` in a traced function registers its gradient in
    TensorFlow's global registry for as long as the process lives, and that
    gradient holds the traced graph. Every translator, export or `predict` trace
    would then stay in memory after its model is gone (figures: benchmarks/RESULTS.md,
    "The test suite's time").
    """

    def call(self, inputs, training=None):
        if (
            not backend.WRITTEN_OUT_LAYER_NORM_GRADIENT
            or self.axis not in ([-1], [len(inputs.shape) - 1])
            or not (self.center and self.scale)
            or getattr(self, "rms_scaling", False)  # Keras' deprecated RMS form: no beta
        ):
            return super().call(inputs)
        # Computed in float32 at least, as Keras does, for half-precision inputs.
        dtype = tf.float32 if inputs.dtype in (tf.float16, tf.bfloat16) else inputs.dtype
        normalize = _normalize_with_written_out_gradient if training else layer_norm
        outputs = normalize(
            tf.cast(inputs, dtype),
            tf.cast(self.gamma, dtype),
            tf.cast(self.beta, dtype),
            self.epsilon,
        )
        return tf.cast(outputs, self.compute_dtype)


def _standardize(x, epsilon):
    """(x standardized over the last axis, 1 / its standard deviation)."""
    centered = x - tf.reduce_mean(x, axis=-1, keepdims=True)
    inverse_std = tf.math.rsqrt(
        tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon
    )
    return centered * inverse_std, inverse_std


def layer_norm(x, gamma, beta, epsilon):
    """The layer's forward computation on plain tensors, for code that runs the
    weights outside the layer (the decoder's fused step)."""
    return _standardize(x, epsilon)[0] * gamma + beta


def _normalize_with_written_out_gradient(x, gamma, beta, epsilon):
    @tf.custom_gradient
    def normalize(x, gamma, beta):
        normalized, inverse_std = _standardize(x, epsilon)

        def grad(upstream):
            rows = list(range(len(upstream.shape) - 1))
            d_normalized = upstream * gamma
            d_x = inverse_std * (
                d_normalized
                - tf.reduce_mean(d_normalized, axis=-1, keepdims=True)
                - normalized * tf.reduce_mean(d_normalized * normalized, axis=-1, keepdims=True)
            )
            d_gamma = tf.reduce_sum(upstream * normalized, axis=rows)
            d_beta = tf.reduce_sum(upstream, axis=rows)
            return d_x, d_gamma, d_beta

        return normalized * gamma + beta, grad

    return normalize(x, gamma, beta)
