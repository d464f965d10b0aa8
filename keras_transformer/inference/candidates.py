"""Beam search's choice of continuations, without a selection over every token.

A beam search step keeps the best of each row's `width * vocab` continuations
(`beam.beam_search`). Written directly (log-softmax over the vocabulary, the
hypotheses' log-probabilities added, one top-k over all of it), that is several
passes over `(rows * width, vocab)` values and a selection over all of them, each
step. Here the same candidates, ties broken the same way, come from each
hypothesis' best logits, found chunk by chunk, and the log-softmax is kept for
those few alone, which is faster (benchmarks/RESULTS.md, "Figures behind design choices").
"""

from __future__ import annotations

import math

import tensorflow as tf

from keras_transformer.inference.search import NEVER_EMITTED, without_never_emitted

# Entries per chunk in `top_per_row`'s first pass.
_CHUNK = 64


def top_per_row(values, k):
    """`tf.math.top_k(values, k)` per row (k at most the row's length), found
    within the k chunks of `_CHUNK` entries with the largest maxima.

    The same result, ties included (lower index first): an entry outside those
    chunks has k chunk maxima ranked above it, so it is not in the top k. On a
    vocabulary-wide row this replaces one selection over every entry by a
    vectorized max per chunk and a selection over k * `_CHUNK` entries.
    """
    length = values.shape[-1]
    chunks = -(-length // _CHUNK)
    if chunks * _CHUNK != length:
        values = tf.pad(values, [[0, 0], [0, chunks * _CHUNK - length]], constant_values=-math.inf)
    values = tf.reshape(values, [-1, chunks, _CHUNK])
    _, chunk_ids = tf.math.top_k(tf.reduce_max(values, axis=-1), k=tf.minimum(k, chunks))
    # In index order, so that ties among the gathered entries still go to the lower index.
    chunk_ids = tf.sort(chunk_ids, axis=-1)
    gathered = tf.reshape(tf.gather(values, chunk_ids, batch_dims=1), [tf.shape(values)[0], -1])
    top_values, position = tf.math.top_k(gathered, k=k)
    ids = tf.gather(chunk_ids, position // _CHUNK, batch_dims=1) * _CHUNK + position % _CHUNK
    return top_values, ids


def best_candidates(logits, alive_log_prob, k, forced=None, free=None):
    """The `k` best continuations of each row's hypotheses: `alive_log_prob` plus
    the next token's log-probability, over every hypothesis and every token but
    `search.NEVER_EMITTED`.

    As `tf.math.top_k` over the row's `(width * vocab)` log-probabilities, ties
    included, without forming them: log-softmax keeps each hypothesis' order,
    so a row's best k are among each hypothesis' best k logits.

    Args:
        logits: float32 `(rows * width, vocab)`.
        alive_log_prob: float32 `(rows, width)`.
        k: int or int32 scalar, at least 1.
        forced: optional int `(rows,)`, a token per row, -1 for none: such a row's
            hypotheses may only continue with it (their other tokens score -inf).
            [END] at a row's limit, a target prefix's next token.
        free: optional bool `(rows,)`: where True, the row's forced token has
            log-probability 0, as a token forced by masking every other logit
            before the log-softmax (transformers' `forced_bos_token_id` and
            `forced_eos_token_id`) has.

    Returns:
        `(log_prob, parent, token)`, `(rows, k')` each with k' = min(k, width *
        vocab): the candidates' log-probabilities, best first, their
        hypotheses (int32, in `[0, width)`) and tokens (int64).
    """
    vocab = logits.shape[-1]
    width = tf.shape(alive_log_prob)[1]
    per_hypothesis = tf.minimum(k, vocab)
    top_logits, ids = top_per_row(without_never_emitted(logits), per_hypothesis)
    # log_softmax's own arithmetic, (x - max) - log(sum(exp(x - max))), kept for
    # k logits a hypothesis, over every id (the never emitted ones included, as
    # the model's log-probabilities are): the max is the best logit or one of theirs.
    banned = tf.gather(logits, NEVER_EMITTED, axis=-1)
    row_max = tf.maximum(top_logits[:, :1], tf.reduce_max(banned, axis=-1, keepdims=True))
    log_sum = tf.math.log(tf.reduce_sum(tf.exp(logits - row_max), axis=-1, keepdims=True))
    log_probs = (top_logits - row_max) - log_sum
    if forced is not None:
        token = tf.cast(tf.repeat(forced, width)[:, None], ids.dtype)  # (rows * width, 1)
        is_forced = token >= 0
        forced_logit = tf.gather(logits, tf.maximum(token, 0), batch_dims=1)
        forced_log_prob = (forced_logit - row_max) - log_sum
        if free is not None:
            forced_log_prob = tf.where(tf.repeat(free, width)[:, None], 0.0, forced_log_prob)
        first = tf.range(per_hypothesis)[None, :] == 0
        log_probs = tf.where(is_forced, tf.where(first, forced_log_prob, -math.inf), log_probs)
        ids = tf.where(tf.logical_and(is_forced, first), token, ids)
    rows = tf.shape(alive_log_prob)[0]
    candidates = tf.reshape(
        alive_log_prob[:, :, None] + tf.reshape(log_probs, [rows, width, -1]), [rows, -1]
    )
    top_log_prob, index = tf.math.top_k(candidates, k=tf.minimum(k, width * per_hypothesis))
    token = tf.gather(tf.reshape(ids, [rows, -1]), index, batch_dims=1)
    return top_log_prob, index // per_hypothesis, tf.cast(token, tf.int64)
