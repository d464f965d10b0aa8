"""The test helpers themselves (`tests/helpers.py`): the batteries can fail, the factory builds.

A battery that passes everything proves nothing, so each check is shown to
fail on a layer that breaks it.
"""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.layers import packing
from tests.helpers import (
    DFF,
    TINY_TRANSFORMER,
    D,
    H,
    assert_same_in_mode,
    features,
    real_mask,
    run_layer_battery,
    tiny_transformer,
)


@keras.saving.register_keras_serializable(package="tests")
class Probe(keras.layers.Layer):
    """Dense then dropout; each flag breaks one thing the layer battery checks."""

    def __init__(self, dropout_rate=0.0, hears_training=True, passes_policy=True, **kwargs):
        super().__init__(**kwargs)
        self.dropout_rate = dropout_rate
        self.hears_training = hears_training
        self.passes_policy = passes_policy
        policy = self.dtype_policy if passes_policy else None
        self.dense = keras.layers.Dense(D, dtype=policy)
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=policy)

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, x, training=None):
        return self.dropout(self.dense(x), training=training if self.hears_training else False)

    def get_config(self):
        config = super().get_config()
        config.update(
            dropout_rate=self.dropout_rate,
            hears_training=self.hears_training,
            passes_policy=self.passes_policy,
        )
        return config


def probe_battery(expected_num_trainable_weights=2, **init_kwargs):
    run_layer_battery(
        Probe,
        init_kwargs,
        (features(),),
        expected_shape=(2, 5, D),
        expected_num_trainable_weights=expected_num_trainable_weights,
    )


@pytest.mark.half_precision
def test_layer_battery_passes_a_sound_layer():
    probe_battery()


@pytest.mark.half_precision
@pytest.mark.parametrize(
    "broken, match",
    [
        (dict(expected_num_trainable_weights=3), "trainable weights"),
        (dict(hears_training=False), "reaches no dropout"),
        (dict(passes_policy=False), "dtype policies"),
    ],
)
def test_layer_battery_fails_a_broken_layer(broken, match):
    with pytest.raises(AssertionError, match=match):
        probe_battery(**broken)


def test_mode_battery_fails_when_the_mode_changes_the_values():
    # In training the hashed masks differ from Keras' masks.
    layer = kt.EncoderLayer(d_model=D, num_heads=H, dff=DFF, dropout_rate=0.5)
    # The values differ, not the shapes or the count of outputs.
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        assert_same_in_mode(layer, "hashed_dropout", (features(),), dict(training=True), atol=1e-5)


def test_mode_battery_fails_when_packing_misplaces_rows(monkeypatch):
    ffn = kt.FeedForward(d_model=D, dff=DFF)
    pack = packing.pack
    monkeypatch.setattr(packing, "pack", lambda x, mask: pack(x, mask)[::-1])
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        assert_same_in_mode(ffn, "packed", (features(),), padding_mask=real_mask(), atol=1e-5)


def test_mode_battery_refuses_gradients_a_mode_does_not_claim():
    layer = kt.CausalSelfAttention(d_model=D, num_heads=H)
    with pytest.raises(ValueError, match="gradients"):
        assert_same_in_mode(layer, "cached", (features(),), gradients=True, atol=0)


def test_tiny_transformer_defaults_overrides_and_seed():
    model = tiny_transformer(vocab_size=13, num_layers=2)
    config = model.get_config()
    assert {k: config[k] for k in TINY_TRANSFORMER} == dict(
        TINY_TRANSFORMER, num_layers=2, input_vocab_size=13, target_vocab_size=13
    )
    assert model.built and model.count_params() > 0
    # The same seed gives the same initial weights, another seed others.
    same = tiny_transformer(vocab_size=13, num_layers=2)
    other = tiny_transformer(vocab_size=13, num_layers=2, seed=1)
    for a, b in zip(model.get_weights(), same.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, c) for a, c in zip(model.get_weights(), other.get_weights()))
    # An explicit vocabulary size wins over `vocab_size`.
    assert tiny_transformer(vocab_size=13, target_vocab_size=7, build=False).target_vocab_size == 7
