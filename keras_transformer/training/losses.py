"""The masked cross-entropy loss: a mean over real (non-padding) target tokens."""

import keras
from keras import ops

from keras_transformer.constants import PAD_ID
from keras_transformer.training.distribute import global_token_mean


def token_losses(label, pred, label_smoothing=0.0):
    """Per-token cross entropy `(batch, length)` in float32 (zero at padding)."""
    pred = ops.cast(pred, "float32")
    label = ops.cast(label, "int32")
    if label_smoothing:
        depth = ops.shape(pred)[-1]  # a tensor where a graph does not know it
        onehot = ops.one_hot(label, depth, dtype="float32")
        smoothed = onehot * (1.0 - label_smoothing) + label_smoothing / ops.cast(depth, "float32")
        loss = ops.categorical_crossentropy(smoothed, pred, from_logits=True)
    else:
        loss = ops.sparse_categorical_crossentropy(label, pred, from_logits=True)
    mask = ops.cast(ops.not_equal(label, PAD_ID), "float32")
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
    return global_token_mean(ops.sum(loss), ops.sum(mask))


# Padded labels get no weight: the training step may drop them (`Transformer.train_step`).
masked_loss.ignores_padding = True


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

    # Padded labels get no weight: the training step may drop them (`Transformer.train_step`).
    ignores_padding = True

    def __init__(self, label_smoothing=0.0, name="masked_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        return masked_loss(y_true, y_pred, self.label_smoothing)

    def get_config(self):
        return {"label_smoothing": self.label_smoothing, "name": self.name}
