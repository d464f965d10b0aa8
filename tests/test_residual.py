"""Residual, the sum, dropout and layer norm around every sublayer (`layers/residual.py`)."""

import pytest

import keras_transformer as kt
from tests.helpers import D, features, run_layer_battery


@pytest.mark.half_precision
def test_residual_battery():
    run_layer_battery(
        kt.layers.Residual,
        dict(dropout_rate=0.0),
        (features(), features(seed=1)),  # the block's input and its sublayer's output
        expected_shape=(2, 5, D),
        expected_num_trainable_weights=2,  # the layer norm's gamma and beta
    )
