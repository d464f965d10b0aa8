"""The masked cross-entropy loss (`losses.py`)."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.training.losses import MaskedLoss, masked_loss


def _logits_and_labels(seed=0, vocab=7):
    rng = np.random.default_rng(seed)
    labels = np.array([[4, 5, 6, 0, 0], [3, 4, 0, 0, 0]], np.int64)
    logits = rng.normal(size=(2, 5, vocab)).astype(np.float32)
    return labels, logits


def test_loss_ignores_logits_at_padded_positions():
    labels, logits = _logits_and_labels()
    changed = logits.copy()
    changed[labels == 0] = np.random.default_rng(1).normal(size=(5, 7)) * 100
    for smoothing in (0.0, 0.1):
        a = float(masked_loss(labels, logits, smoothing))
        b = float(masked_loss(labels, changed, smoothing))
        assert a == pytest.approx(b, rel=1e-6)
    # ...but the logits at real positions do count.
    changed[0, 0, 4] += 5
    assert float(masked_loss(labels, changed)) != pytest.approx(float(masked_loss(labels, logits)))


def test_loss_is_the_mean_over_real_tokens():
    labels, logits = _logits_and_labels()
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    real = np.argwhere(labels > 0)
    expected = -np.mean([log_p[b, t, labels[b, t]] for b, t in real])
    assert float(masked_loss(labels, logits)) == pytest.approx(expected, rel=1e-5)


def test_label_smoothing_against_a_hand_computation():
    logits = np.array([[[2.0, 0.5, -1.0, 0.0]]], np.float32)
    label = np.array([[1]], np.int64)
    eps, vocab = 0.1, 4
    p = np.exp(logits[0, 0]) / np.exp(logits[0, 0]).sum()
    q = np.full(vocab, eps / vocab)
    q[1] += 1 - eps
    expected = -(q * np.log(p)).sum()
    assert float(masked_loss(label, logits, eps)) == pytest.approx(expected, rel=1e-5)
    assert float(MaskedLoss(label_smoothing=eps)(label, logits)) == pytest.approx(expected, 1e-5)


@pytest.mark.half_precision
def test_loss_is_float32_for_half_precision_logits():
    labels, logits = _logits_and_labels()
    loss = masked_loss(labels, tf.constant(logits, tf.float16), 0.1)
    assert loss.dtype == tf.float32
    assert float(loss) == pytest.approx(float(masked_loss(labels, logits, 0.1)), rel=1e-2)


def test_label_smoothing_in_a_graph_that_does_not_know_the_vocabulary_size():
    labels = np.array([[4, 2, 0]], np.int32)
    logits = np.random.default_rng(1).normal(size=(1, 3, 7)).astype(np.float32)
    spec = tf.TensorSpec([None, None, None], tf.float32)

    @tf.function(input_signature=[spec])
    def smoothed(pred):
        return masked_loss(labels, pred, label_smoothing=0.1)

    np.testing.assert_allclose(smoothed(logits), masked_loss(labels, logits, 0.1), rtol=1e-6)
