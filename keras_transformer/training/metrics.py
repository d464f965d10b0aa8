"""Metrics over real (non-padding) target tokens: masked accuracy and a token count."""

import keras
from keras import ops

from keras_transformer.constants import PAD_ID
from keras_transformer.layers import backend


def _real_and_correct(label, pred):
    """float32 masks `(batch, length)`: real target tokens, and tokens predicted exactly."""
    label = ops.cast(label, "int32")
    real = ops.cast(ops.not_equal(label, PAD_ID), "float32")
    predicted = backend.argmax(pred)
    correct = ops.cast(ops.equal(predicted, label), "float32") * real
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
    return ops.divide_no_nan(ops.sum(correct), ops.sum(real))


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
        self.correct.assign_add(ops.sum(correct))
        self.total.assign_add(ops.sum(real))

    def result(self):
        return ops.divide_no_nan(self.correct, self.total)

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
        self.total.assign_add(ops.sum(ops.cast(ops.not_equal(y_true, PAD_ID), "float32")))

    def result(self):
        # A copy: the logs must not follow the variable once it is reset.
        return ops.copy(self.total)

    def reset_state(self):
        self.total.assign(0.0)
