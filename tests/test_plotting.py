"""Plots are real, non-empty PNG files of the expected size."""

import numpy as np
import pytest
from PIL import Image

from keras_transformer import plotting


def png_size(path):
    with Image.open(path) as image:
        assert image.format == "PNG"
        # A blank canvas would be a single colour.
        assert len(image.convert("L").getcolors(maxcolors=1 << 16) or [None] * 2) > 1
        return image.size


def test_positional_encoding_plot(tmp_path):
    path = tmp_path / "encoding.png"
    plotting.plot_positional_encoding(64, 32, path=path)
    width, height = png_size(path)
    assert 600 < width < 900 and 400 < height < 600


def test_learning_rate_plot(tmp_path):
    path = tmp_path / "schedule.png"
    plotting.plot_learning_rate(128, 400, 4000, path=path)
    width, height = png_size(path)
    assert 500 < width < 800 and 300 < height < 500


def test_attention_heads_plot(tmp_path):
    rng = np.random.default_rng(0)
    weights = rng.random((8, 5, 6))
    weights /= weights.sum(-1, keepdims=True)
    path = tmp_path / "attention.png"
    plotting.plot_attention_heads(
        weights, list("abcdef"), ["[START]", "w", "x", "y", "z"], path=path
    )
    width, height = png_size(path)
    assert width > height > 400  # two rows of four heads


def test_attention_plot_rejects_mismatched_labels():
    with pytest.raises(ValueError, match="target x source"):
        plotting.plot_attention_heads(np.zeros((2, 3, 4)), list("abc"), list("xyz"))
    with pytest.raises(ValueError, match="shape"):
        plotting.plot_attention_heads(np.zeros((3, 4)), list("abcd"), list("xyz"))
