"""Training pieces: the warmup learning-rate schedule, masked loss and accuracy."""

import keras
import tensorflow as tf

from keras_transformer.distribute import global_token_mean
from keras_transformer.tokenizers import PAD_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lr = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (paper, eq. 3).

    Rises linearly for `warmup_steps`, then decays as 1/sqrt(step). Step 0 is
    treated as step 1 (0^-0.5 would be infinite).

    Args:
        d_model: int. Model feature size.
        warmup_steps: int. Defaults to 4000.
    """

    def __init__(self, d_model, warmup_steps=4000):
        super().__init__()
        if d_model <= 0 or warmup_steps <= 0:
            raise ValueError(
                "d_model and warmup_steps must be positive. "
                f"Received: d_model={d_model}, warmup_steps={warmup_steps}"
            )
        self.d_model = d_model
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = tf.maximum(tf.cast(step, tf.float32), 1.0)
        d_model = tf.cast(self.d_model, tf.float32)
        return tf.math.rsqrt(d_model) * tf.minimum(
            tf.math.rsqrt(step), step * self.warmup_steps**-1.5
        )

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps}


# The tutorial's name for the schedule.
CustomSchedule = WarmupSchedule


def make_optimizer(d_model, warmup_steps=4000):
    """Adam with the paper's settings and the warmup schedule."""
    return keras.optimizers.Adam(
        WarmupSchedule(d_model, warmup_steps), beta_1=0.9, beta_2=0.98, epsilon=1e-9
    )


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
    """`masked_loss` as a configurable Keras loss (serializable with the model)."""

    def __init__(self, label_smoothing=0.0, name="masked_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        return masked_loss(y_true, y_pred, self.label_smoothing)

    def get_config(self):
        return {"label_smoothing": self.label_smoothing, "name": self.name}


@keras.saving.register_keras_serializable(package="keras_transformer")
def masked_accuracy(label, pred):
    """Fraction of real (non-padding) target tokens predicted exactly."""
    label = tf.cast(label, tf.int64)
    match = tf.cast(tf.argmax(pred, axis=-1) == label, tf.float32)
    mask = tf.cast(label != PAD_ID, tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(match * mask), tf.reduce_sum(mask))
