"""Learning-rate schedules and the optimizer they drive.

Both schedules rise linearly for `warmup_steps` and then decay as 1/sqrt(step);
they differ in how the peak is set. The paper's `WarmupSchedule` derives it
from the model size (d_model^-0.5 * warmup_steps^-0.5: 7e-4 for the tutorial's
d_model 128 and 4,000 steps); fairseq's `InverseSqrtSchedule` takes it as a
number (its small-corpus recipes use 5e-4 to 5e-3). `Cooldown` wraps either and
brings it down to zero over the last part of a run, whose end a time budget
only fixes while the run goes on.
"""

import math

import keras
from keras import ops


def _warmup_then_inverse_sqrt(step, peak, warmup_steps):
    """peak * min(step / warmup, sqrt(warmup / step)); step 0 counts as step 1."""
    step = ops.maximum(ops.cast(step, "float32"), 1.0)
    warmup = float(warmup_steps)
    return peak * ops.minimum(step / warmup, ops.sqrt(warmup / step))


def _check_positive(**values):
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{name} must be positive. Received: {name}={value}")


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
        _check_positive(d_model=d_model, warmup_steps=warmup_steps)
        self.d_model = d_model
        self.warmup_steps = warmup_steps

    @property
    def peak_learning_rate(self) -> float:
        return (self.d_model * self.warmup_steps) ** -0.5

    def __call__(self, step):
        return _warmup_then_inverse_sqrt(step, self.peak_learning_rate, self.warmup_steps)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps}


# The tutorial's name for the schedule.
CustomSchedule = WarmupSchedule


@keras.saving.register_keras_serializable(package="keras_transformer")
class InverseSqrtSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """fairseq's `inverse_sqrt`: linear warmup to `peak_learning_rate`, then 1/sqrt decay.

    lr = peak * min(step / warmup_steps, sqrt(warmup_steps / step)).

    Args:
        peak_learning_rate: float. The rate at the end of the warmup.
        warmup_steps: int. Defaults to 4000.
    """

    def __init__(self, peak_learning_rate, warmup_steps=4000):
        super().__init__()
        _check_positive(peak_learning_rate=peak_learning_rate, warmup_steps=warmup_steps)
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        return _warmup_then_inverse_sqrt(step, self.peak_learning_rate, self.warmup_steps)

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "warmup_steps": self.warmup_steps}


@keras.saving.register_keras_serializable(package="keras_transformer")
class Cooldown(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule`, brought down linearly to zero over the last `fraction` of the run's steps.

    lr = schedule(step) * min(1, (last_step - step) / (fraction * last_step)),

    `step` being the updates made before this one (Keras' convention), so a run of
    `last_step` updates cools its last `fraction * last_step` of them and its last
    update runs at 1 / (fraction * last_step) of the rate.

    The 1/sqrt decay leaves a short run at a third of its peak rate or more, where
    the weights still hop around the minimum they found; letting the rate down at
    the end settles them. A run that ends on a time budget does not know its last
    step when it starts, so `last_step` is a variable: until it is set (by
    `callbacks.ProjectedEnd`, from the steps an epoch takes and the epochs and
    minutes left) the schedule runs unchanged.

    Args:
        schedule: a `LearningRateSchedule`.
        fraction: float in (0, 1). The share of the run's steps that cool down.
    """

    def __init__(self, schedule, fraction):
        super().__init__()
        if not 0 < fraction < 1:
            raise ValueError(f"fraction must be in (0, 1). Received: fraction={fraction}")
        self.schedule = schedule
        self.fraction = fraction
        # Not saved with the optimizer: a resumed run projects its end afresh.
        self.last_step = keras.Variable(math.inf, trainable=False, dtype="float32")

    def set_last_step(self, step: float):
        if not (math.isfinite(step) and step > 0):
            raise ValueError(f"The last step must be a positive number. Received: {step}")
        self.last_step.assign(float(step))

    def __call__(self, step):
        step = ops.cast(step, "float32")
        last_step = ops.convert_to_tensor(self.last_step)
        left = (last_step - step) / (self.fraction * last_step)
        # inf / inf is nan while the end is unknown: no cooldown then.
        factor = ops.where(ops.isfinite(last_step), ops.clip(left, 0.0, 1.0), 1.0)
        return self.schedule(step) * factor

    def get_config(self):
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "fraction": self.fraction,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["schedule"] = keras.saving.deserialize_keras_object(config["schedule"])
        return cls(**config)


def make_schedule(d_model, warmup_steps=4000, learning_rate=None, cooldown=0.0):
    """The learning-rate schedule of a training run.

    Args:
        d_model: int. Sets the paper's peak rate when `learning_rate` is None.
        warmup_steps: int. Steps of linear warmup. Defaults to 4000.
        learning_rate: float. The peak rate of `InverseSqrtSchedule`; None
            (default) uses the paper's `WarmupSchedule`.
        cooldown: float. With a share in (0, 1), the schedule is wrapped in
            `Cooldown`, whose end must then be set (`callbacks.ProjectedEnd`
            does it in a `fit`). Defaults to 0 (none).
    """
    if learning_rate is None:
        schedule = WarmupSchedule(d_model, warmup_steps)
    else:
        schedule = InverseSqrtSchedule(learning_rate, warmup_steps)
    return Cooldown(schedule, cooldown) if cooldown else schedule


def make_optimizer(
    d_model,
    warmup_steps=4000,
    learning_rate=None,
    weight_decay=0.0,
    clip_norm=None,
):
    """Adam with the paper's settings (beta_1 0.9, beta_2 0.98, epsilon 1e-9).

    Args:
        d_model: int. Sets the paper's peak rate when `learning_rate` is None.
        warmup_steps: int. Steps of linear warmup. Defaults to 4000.
        learning_rate: float. The peak rate of `InverseSqrtSchedule`; None
            (default) uses the paper's `WarmupSchedule`; a schedule (such as
            `make_schedule`'s) is used as it is.
        weight_decay: float. Decoupled weight decay (AdamW) when positive.
            Defaults to 0.
        clip_norm: float. Clips the gradients' global norm to this value.
            Defaults to None (no clipping).
    """
    if isinstance(learning_rate, keras.optimizers.schedules.LearningRateSchedule):
        schedule = learning_rate
    else:
        schedule = make_schedule(d_model, warmup_steps, learning_rate)
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0. Received: weight_decay={weight_decay}")
    if clip_norm is not None:
        _check_positive(clip_norm=clip_norm)
    options = dict(beta_1=0.9, beta_2=0.98, epsilon=1e-9, global_clipnorm=clip_norm)
    if weight_decay:
        return keras.optimizers.AdamW(schedule, weight_decay=weight_decay, **options)
    return keras.optimizers.Adam(schedule, **options)
