"""Beam search's candidates (`candidates.py`) against a selection over every token."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.constants import END_ID, PAD_ID, START_ID
from keras_transformer.inference import candidates


def _flat_candidates(logits, alive_log_prob, k, forced):
    """Beam search's candidates the direct way: every hypothesis' every token but [PAD]
    and [START] (unless forced)."""
    rows, width = alive_log_prob.shape
    vocab = logits.shape[-1]
    log_probs = tf.reshape(tf.nn.log_softmax(logits), [rows, width, vocab])
    token = tf.cast(forced, tf.int32)[:, None, None]
    never = tf.logical_or(tf.range(vocab) == PAD_ID, tf.range(vocab) == START_ID)
    ruled_out = tf.where(token >= 0, tf.range(vocab) != token, never)
    log_probs = tf.where(ruled_out, float("-inf"), log_probs)
    candidates = tf.reshape(alive_log_prob[:, :, None] + log_probs, [rows, width * vocab])
    values, index = tf.math.top_k(candidates, k=min(k, width * vocab))
    return values.numpy(), (index // vocab).numpy(), (index % vocab).numpy()


@pytest.mark.parametrize("vocab", [5, 50, 64, 1000])
def test_best_candidates_equal_a_selection_over_every_token(vocab):
    """Chunked per-hypothesis selection == top-k over all (width * vocab) log-probabilities,
    with ties (repeated logits), hypotheses at -inf (a first step), rows that must end
    and rows held to another token (a target prefix's)."""
    rng = np.random.default_rng(vocab)
    rows, width, k = 40, 3, 6
    # Few distinct values, so that many candidates tie, and the best ones spread over
    # the vocabulary (over several of the selection's chunks).
    logits = rng.integers(0, 3, size=(rows * width, vocab)) * 0.5
    for row in logits:
        best = rng.choice(vocab, size=min(3 * k, vocab), replace=False)
        row[best] = rng.choice([2.0, 2.5], size=len(best), p=[0.8, 0.2])
    logits = tf.constant(logits, tf.float32)
    alive = rng.normal(size=(rows, width)).astype(np.float32)
    alive[0, 1:] = -np.inf
    alive[1] = alive[1, 0]
    held = np.where(np.arange(rows) % 4 == 2, np.arange(rows) % vocab, -1)
    forced = tf.constant(np.where(np.arange(rows) % 4 == 1, END_ID, held), tf.int64)
    got = candidates.best_candidates(logits, tf.constant(alive), k, forced)
    want = _flat_candidates(logits, tf.constant(alive), k, forced)
    finite = np.isfinite(want[0])
    np.testing.assert_allclose(got[0].numpy(), want[0], rtol=0, atol=1e-6)
    for got_ids, want_ids in zip(got[1:], want[1:], strict=True):
        np.testing.assert_array_equal(got_ids.numpy()[finite], want_ids[finite])
    assert got[2].dtype == tf.int64
