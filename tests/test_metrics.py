"""Metrics over real target tokens (`metrics.py`)."""

import numpy as np
import pytest

from keras_transformer.training.metrics import MaskedAccuracy, masked_accuracy


def test_masked_accuracy_counts_real_tokens_only():
    labels = np.array([[4, 5, 0], [6, 0, 0]], np.int64)
    logits = np.zeros((2, 3, 7), np.float32)
    logits[0, 0, 4] = logits[0, 1, 1] = logits[1, 0, 6] = 1.0  # 2 of 3 right
    logits[0, 2, 0] = logits[1, 1, 0] = 1.0  # "right" on padding: must not count
    assert float(masked_accuracy(labels, logits)) == pytest.approx(2 / 3)


def test_accuracy_metric_weighs_tokens_not_batches():
    metric = MaskedAccuracy()
    right = np.eye(7, dtype=np.float32)[[[4, 5, 6, 4]]]  # 4 tokens, all right
    metric.update_state(np.array([[4, 5, 6, 4]]), right)
    metric.update_state(np.array([[4]]), np.eye(7, dtype=np.float32)[[[5]]])  # 1 wrong
    metric.update_state(np.zeros((0, 3), np.int64), np.zeros((0, 3, 7), np.float32))  # empty
    assert float(metric.result()) == pytest.approx(4 / 5)
