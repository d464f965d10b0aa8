"""HashedDropout: dropout whose mask is an integer hash, cheap under XLA.

`keras.layers.Dropout` draws its mask from TensorFlow's stateless Philox
generator. XLA compiles that generator into slow code on CPU, many times slower
than the hash below, and dropout is a large share of an XLA training step
(figures: benchmarks/RESULTS.md, "Figures behind design choices").

Here each element's keep decision is a hash of its flat index and of the
layer's per-call seed: two rounds of a 32-bit integer mixer (xor-shift and
multiply, the "lowbias32" constants of Chris Wellons' hash search), a dozen
integer operations that XLA fuses into the neighbouring elementwise work.
The hash is a counter-based generator in the same sense as Philox, with fewer
rounds: plenty for a Bernoulli mask, not meant for anything statistical.

The hash is TensorFlow's (`backend.HASHED_DROPOUT`); on the other backends the
layer draws its masks as `keras.layers.Dropout` does.
"""

import keras

from keras_transformer.layers import backend, validation

if backend.HASHED_DROPOUT:
    import tensorflow as tf


def _mix(x):
    """A 32-bit integer mixer: every input bit affects every output bit."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
    x = x * tf.constant(0x7FEB352D, tf.uint32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15))
    x = x * tf.constant(0x846CA68B, tf.uint32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def hashed_keep_mask(shape, rate, seed):
    """Boolean mask of `shape`, each element True with probability `1 - rate`.

    Args:
        shape: 1-D int tensor or list, the mask's shape.
        rate: float in [0, 1), the probability of False.
        seed: int tensor of shape (2,); equal seeds give equal masks.
    """
    seed = tf.cast(seed, tf.uint32)
    index = tf.cast(tf.reshape(tf.range(tf.reduce_prod(shape)), shape), tf.uint32)
    # The second seed word enters after a full round, so masks of different
    # seeds are unrelated rather than shifted copies of each other.
    bits = _mix(_mix(tf.bitwise.bitwise_xor(index, _mix(seed[0]))) + seed[1])
    threshold = min(round(rate * 2**32), 2**32 - 1)
    return bits >= tf.constant(threshold, tf.uint32)


@keras.saving.register_keras_serializable(package="keras_transformer")
class HashedDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with a hashed mask (see the module docstring).

    Same contract as the Keras layer: during training each element is zeroed
    with probability `rate` and the kept ones are scaled by `1 / (1 - rate)`;
    outside training it is the identity. Seeding works the Keras way (`seed`,
    or `keras.utils.set_random_seed`); every call draws a fresh seed, so
    successive steps get different masks.

    Use it where the training step is XLA-compiled (`jit_compile=True`):
    there it is several times cheaper than Philox. Without XLA TensorFlow's
    own Philox kernel is fast, each integer operation of the hash writes a
    tensor of its own, and the hash is slower. The hash uses
    uint32 multiplication, which TensorFlow implements on GPU only under XLA.

    On JAX and PyTorch it draws Keras' masks (the same contract, other bits).

    Args:
        rate: float in [0, 1). Fraction of the inputs to drop.
        seed: int. Optional random seed.
        **kwargs: base layer arguments. `noise_shape` is not supported.
    """

    def __init__(self, rate, seed=None, **kwargs):
        if kwargs.get("noise_shape") is not None:
            raise ValueError(
                "HashedDropout does not support `noise_shape`; use keras.layers.Dropout. "
                f"Received: noise_shape={kwargs['noise_shape']}"
            )
        kwargs.pop("noise_shape", None)
        validation.check_rate("rate", rate)
        super().__init__(rate, seed=seed, **kwargs)

    def call(self, inputs, training=False):
        if not backend.HASHED_DROPOUT:
            return super().call(inputs, training=training)
        if not training or self.rate == 0:
            return inputs
        keep = hashed_keep_mask(tf.shape(inputs), self.rate, self.seed_generator.next())
        scale = tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return tf.where(keep, inputs * scale, tf.zeros_like(inputs))


def make_dropout(rate, hashed, dtype=None, name=None):
    """A `HashedDropout` when `hashed`, else a `keras.layers.Dropout`."""
    layer_class = HashedDropout if hashed else keras.layers.Dropout
    return layer_class(rate, dtype=dtype, name=name)
