"""The learning-rate schedules and the optimizer (`schedules.py`)."""

import math

import keras
import numpy as np
import pytest

from keras_transformer.training.schedules import (
    Cooldown,
    CustomSchedule,
    InverseSqrtSchedule,
    WarmupSchedule,
    make_optimizer,
    make_schedule,
)


@pytest.mark.parametrize("step", [0, 1, 10, 999, 1000, 1001, 5000, 100000])
def test_schedule_follows_the_formula(step):
    d_model, warmup = 128, 1000
    expected = d_model**-0.5 * min(max(step, 1) ** -0.5, max(step, 1) * warmup**-1.5)
    assert float(WarmupSchedule(d_model, warmup)(step)) == pytest.approx(expected, rel=1e-5)


def test_schedule_peaks_at_warmup_and_round_trips_config():
    schedule = CustomSchedule(64, warmup_steps=100)
    values = [float(schedule(s)) for s in range(1, 300)]
    assert int(np.argmax(values)) + 1 == 100
    again = WarmupSchedule.from_config(schedule.get_config())
    assert float(again(57)) == float(schedule(57))
    with pytest.raises(ValueError, match="warmup_steps"):
        WarmupSchedule(64, warmup_steps=0)


@pytest.mark.parametrize("step", [0, 1, 500, 1999, 2000, 2001, 8000, 100000])
def test_inverse_sqrt_follows_fairseq(step):
    # fairseq's inverse_sqrt with warmup_init_lr 0: linear to the peak, then peak * sqrt(w / s).
    peak, warmup = 5e-3, 2000
    step_ = max(step, 1)
    expected = peak * step_ / warmup if step_ < warmup else peak * (warmup / step_) ** 0.5
    schedule = InverseSqrtSchedule(peak, warmup)
    assert float(schedule(step)) == pytest.approx(expected, rel=1e-5)
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(again(step)) == float(schedule(step))


def test_the_paper_schedule_is_inverse_sqrt_with_a_derived_peak():
    paper = WarmupSchedule(128, 4000)
    same = InverseSqrtSchedule(paper.peak_learning_rate, 4000)
    for step in (1, 1000, 4000, 12345):
        assert float(paper(step)) == pytest.approx(float(same(step)), rel=1e-6)


def test_make_optimizer_options():
    paper = make_optimizer(128)
    assert isinstance(paper, keras.optimizers.Adam)
    assert isinstance(paper._learning_rate, WarmupSchedule)
    recipe = make_optimizer(128, 2000, learning_rate=5e-3, weight_decay=1e-4, clip_norm=1.0)
    assert isinstance(recipe, keras.optimizers.AdamW)
    assert recipe.weight_decay == 1e-4 and recipe.global_clipnorm == 1.0
    assert isinstance(recipe._learning_rate, InverseSqrtSchedule)
    with pytest.raises(ValueError, match="clip_norm"):
        make_optimizer(128, clip_norm=0)
    with pytest.raises(ValueError, match="weight_decay"):
        make_optimizer(128, weight_decay=-1)


def test_cooldown_is_the_schedule_until_its_end_is_known_then_falls_to_zero():
    inner = InverseSqrtSchedule(1e-3, warmup_steps=10)
    cooldown = Cooldown(inner, fraction=0.2)
    for step in (1, 10, 80, 100, 10**6):
        assert float(cooldown(step)) == float(inner(step))
    cooldown.set_last_step(100)
    # A run of 100 updates sees steps 0-99 (Keras counts the updates made before
    # each): its last 20 fall linearly, full rate up to step 80, then
    # (100 - step) / 20 of it, the last update at 1/20, zero past the end.
    for step in (1, 10, 50, 80):
        assert float(cooldown(step)) == pytest.approx(float(inner(step)), rel=1e-6)
    for step in (81, 90, 99):
        expected = float(inner(step)) * (100 - step) / 20
        assert float(cooldown(step)) == pytest.approx(expected, rel=1e-5)
    assert float(cooldown(100)) == 0.0 and float(cooldown(500)) == 0.0
    for bad in (0, -3, math.nan, math.inf):
        with pytest.raises(ValueError, match="last step"):
            cooldown.set_last_step(bad)


def test_cooldown_round_trips_config_and_checks_its_fraction():
    cooldown = make_schedule(128, 100, learning_rate=3e-3, cooldown=0.25)
    assert isinstance(cooldown, Cooldown)
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(cooldown))
    assert isinstance(again.schedule, InverseSqrtSchedule) and again.fraction == 0.25
    assert float(again(57)) == float(cooldown(57))
    for fraction in (0, 1, -0.5):
        with pytest.raises(ValueError, match="fraction"):
            Cooldown(InverseSqrtSchedule(1e-3), fraction)
    # make_optimizer takes a schedule as it is.
    assert make_optimizer(128, learning_rate=cooldown)._learning_rate is cooldown
