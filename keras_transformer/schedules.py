"""The paper's learning-rate schedule and the optimizer it drives."""

import keras
import tensorflow as tf


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
