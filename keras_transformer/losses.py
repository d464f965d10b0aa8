"""The masked cross-entropy loss: a mean over real (non-padding) target tokens."""

import keras
import tensorflow as tf

from keras_transformer.constants import PAD_ID
from keras_transformer.distribute import global_token_mean


def token_losses(label, pred, label_smoothing=0.0):
    """Per-token cross entropy `(batch, length)` in float32 (zero at padding)."""
    pred = tf.cast(pred, tf.float32)
    label = tf.cast(label, tf.int32)
    if label_smoothing:
        depth = tf.shape(pred)[-1]
        onehot = tf.one_hot(label, depth, dtype=tf.float32)
        smoothed = onehot * (1.0 - label_smoothing) + label_smoothing / tf.cast(depth, tf.float32)
        loss = tf.nn.softmax_cross_entropy_with_logits(smoothed, pred)
    else:
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(label, pred)
    mask = tf.cast(label != PAD_ID, tf.float32)
    return loss * mask, mask


@keras.saving.register_keras_serializable(package="keras_transformer")
def masked_loss(label, pred, label_smoothing=0.0):
    """Mean cross entropy over real (non-padding) target tokens, in float32.

    Under a `tf.distribute` strategy with several replicas it is the mean over
    the real tokens of the *global* batch (see `distribute.global_token_mean`),
    not the mean of the replicas' means.

    Args:
        label: int `(batch, length)`, 0 at padding.
        pred: logits `(batch, length, vocab)`.
        label_smoothing: float. Mass spread uniformly over the vocabulary
            (the paper uses 0.1). Defaults to 0.
    """
    loss, mask = token_losses(label, pred, label_smoothing)
    return global_token_mean(tf.reduce_sum(loss), tf.reduce_sum(mask))


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedLoss(keras.losses.Loss):
    """`masked_loss` as a configurable Keras loss (serializable with the model).

    Args:
        label_smoothing: float. Mass spread uniformly over the vocabulary
            (the paper uses 0.1). Defaults to 0.
        name: str. The loss' name. Defaults to "masked_loss".
        **kwargs: other `keras.losses.Loss` arguments (`dtype`, ...).

    Example:
    >>> model.compile(optimizer="adam", loss=MaskedLoss(label_smoothing=0.1))
    """

    def __init__(self, label_smoothing=0.0, name="masked_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        return masked_loss(y_true, y_pred, self.label_smoothing)

    def get_config(self):
        return {"label_smoothing": self.label_smoothing, "name": self.name}


def ignores_padding(loss) -> bool:
    """Whether `loss` is this library's masked loss, which gives padded labels no weight."""
    return isinstance(loss, MaskedLoss) or loss is masked_loss
