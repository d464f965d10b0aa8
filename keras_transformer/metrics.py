"""Metrics over real (non-padding) target tokens: masked accuracy and a token count."""

import keras
import tensorflow as tf

from keras_transformer.constants import PAD_ID


def _real_and_correct(label, pred):
    """float32 masks `(batch, length)`: real target tokens, and tokens predicted exactly."""
    label = tf.cast(label, tf.int64)
    real = tf.cast(label != PAD_ID, tf.float32)
    correct = tf.cast(tf.argmax(pred, axis=-1) == label, tf.float32) * real
    return real, correct


@keras.saving.register_keras_serializable(package="keras_transformer")
def masked_accuracy(label, pred):
    """Fraction of real (non-padding) target tokens predicted exactly.

    Args:
        label: int `(batch, length)`, 0 at padding.
        pred: logits or probabilities `(batch, length, vocab)`; the
            prediction is their argmax.

    Returns:
        float32 scalar: correct real tokens over real tokens (0 if none).
    """
    real, correct = _real_and_correct(label, pred)
    return tf.math.divide_no_nan(tf.reduce_sum(correct), tf.reduce_sum(real))


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.Metric):
    """`masked_accuracy` over all real target tokens seen, as a stateful metric.

    Wrapping the function averages per-batch values: short batches weigh as
    much as full ones, and the empty batches tf.distribute may feed at the end
    of an unknown-length dataset count as zero accuracy. This counts tokens.

    Args:
        name: str. The metric's name. Defaults to "masked_accuracy".
        **kwargs: other `keras.metrics.Metric` arguments (`dtype`).
    """

    def __init__(self, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.correct = self.add_variable(
            shape=(), initializer="zeros", dtype="float32", name="correct"
        )
        self.total = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        real, correct = _real_and_correct(y_true, y_pred)
        self.correct.assign_add(tf.reduce_sum(correct))
        self.total.assign_add(tf.reduce_sum(real))

    def result(self):
        return tf.math.divide_no_nan(self.correct, self.total)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TargetTokens(keras.metrics.Metric):
    """Counts the real (non-padding) target tokens seen: the numerator of tokens/s."""

    def __init__(self, name="target_tokens", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total.assign_add(tf.cast(tf.math.count_nonzero(y_true), tf.float32))

    def result(self):
        # A copy: the logs must not follow the variable once it is reset.
        return tf.identity(self.total)

    def reset_state(self):
        self.total.assign(0.0)
