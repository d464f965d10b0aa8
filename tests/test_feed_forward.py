"""FeedForward, the position-wise sublayer (`layers/feed_forward.py`)."""

import pytest

import keras_transformer as kt
from tests.helpers import DFF, D, assert_close, features, run_layer_battery


@pytest.mark.half_precision
def test_feed_forward_battery():
    layer = run_layer_battery(
        kt.FeedForward,
        dict(d_model=D, dff=DFF, dropout_rate=0.0),
        (features(),),
        expected_shape=(2, 5, D),
        # Two Dense layers (kernel and bias each) and the layer norm's gamma and beta.
        expected_num_trainable_weights=2 * 2 + 2,
    )
    # Pre-LN keeps the residual path un-normalized.
    pre = kt.FeedForward(d_model=D, dff=DFF, dropout_rate=0.0, normalize_first=True)
    x = features()
    y = pre(x)
    hidden = pre.output_dense(pre.inner_dense(pre.residual.layernorm(x)))
    assert_close(y, x + hidden)
    assert layer.get_config()["activation"] == "relu"


def test_feed_forward_activation_option():
    layer = kt.FeedForward(d_model=D, dff=DFF, activation="gelu")
    assert kt.FeedForward.from_config(layer.get_config()).get_config()["activation"] == "gelu"
