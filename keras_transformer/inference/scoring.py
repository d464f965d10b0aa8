"""Scoring given translations: the model's log-probability of a target given its source.

What filtering a parallel corpus and quality estimation ask of a translation model
(fairseq's `--score-reference`, CTranslate2's `score_batch`, `onmt-main score`): for
each (source, target) pair, one teacher-forced pass of the full model over
`[START] target` predicts `target [END]`, and the log-probabilities of those tokens
are read off its float32 logits. The total is the quantity the searches report as
the `score` of their own output (their [END] scored and counted): scoring a search's
tokens gives back its score.

Rows are scored in bounded sub-batches, as the searches decode (`sub_batches.py`):
sorted by length, `sub_batch_size` rows at a time, results back in the rows' order.
A sub-batch's memory is its logits, `rows x target tokens x vocabulary` floats.

`Translator.score` runs this on strings (the export's `score` signature);
`score_targets` runs it on token ids.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.constants import END_ID, START_ID
from keras_transformer.inference import sub_batches
from keras_transformer.inference.beam import length_penalty

SOURCE_SPEC = tf.TensorSpec([None], tf.string, name="source")
TARGET_SPEC = tf.TensorSpec([None], tf.string, name="target")
# The outputs of `Translator.score` and of the export's `score` signature.
SCORE_OUTPUTS = (
    "score",
    "normalized_score",
    "token_scores",
    "length",
    "source_truncated",
    "target_truncated",
)


class ScoreResult(NamedTuple):
    """Scores of given targets.

    scores: float32 `(batch,)`, the sum of the log-probabilities of a row's
        target tokens and its [END].
    lengths: int32 `(batch,)`, the tokens scored per row, [END] included.
    token_scores: float32 `(batch, tokens)`, each scored token's
        log-probability, 0-padded after a row's [END]; `tokens` is the longest
        row's length.
    """

    scores: tf.Tensor
    lengths: tf.Tensor
    token_scores: tf.Tensor


def token_log_probs(model, context_ids, target_ids):
    """Log-probabilities of `target_ids` and [END] after [START], one teacher-forced pass.

    Args:
        model: a built `Transformer`.
        context_ids: int64 `(rows, length)`, the sources ([START] ... [END]), 0-padded.
        target_ids: int64 `tf.RaggedTensor` `(rows, None)`, the targets without
            [START] and [END].

    Returns:
        float32 `(rows, longest + 1)`, 0-padded, and the int32 lengths `(rows,)`.
    """
    target_ids = tf.cast(target_ids, tf.int64)
    column = tf.stack([target_ids.nrows(), 1])
    start = tf.fill(column, tf.constant(START_ID, tf.int64))
    end = tf.fill(column, tf.constant(END_ID, tf.int64))
    target_in = tf.concat([start, target_ids], axis=1).to_tensor()  # (rows, T)
    target_out = tf.concat([target_ids, end], axis=1)
    lengths = tf.cast(target_out.row_lengths(), tf.int32)
    logits = tf.cast(model((context_ids, target_in), training=False), tf.float32)  # (rows, T, V)
    # log_softmax at the targets only: the logits' one copy is the exponentials.
    picked = tf.gather(logits, target_out.to_tensor(), batch_dims=2)
    log_probs = picked - tf.reduce_logsumexp(logits, axis=-1)
    real = tf.sequence_mask(lengths, tf.shape(log_probs)[1])
    return tf.where(real, log_probs, 0.0), lengths


def score_targets(model, context_ids, target_ids, sub_batch_size: int = 64) -> ScoreResult:
    """Teacher-forced scores of `target_ids` given `context_ids`, `sub_batch_size` rows at a time.

    Rows are sorted by source and target length together, so a sub-batch pads
    little; the results come back in the rows' order. Score a search's output
    (`DecodeResult.tokens` without its [END]) to get its score back.

    Args:
        model: a built `Transformer`.
        context_ids: int64 `tf.RaggedTensor` `(batch, None)`, the sources
            ([START] ... [END]), each within the model's `max_length`.
        target_ids: int `tf.RaggedTensor` `(batch, None)`, the targets without
            [START] and [END], each shorter than the model's `max_length`.
        sub_batch_size: int. Most rows scored at once. Defaults to 64.

    Returns:
        A `ScoreResult`.
    """
    positions = int(model.max_length)
    target_lengths = target_ids.row_lengths()
    longest = tf.reduce_max(tf.pad(target_lengths, [[0, 1]]))  # 0 for zero rows
    fits = tf.debugging.assert_less(
        longest,
        tf.constant(positions, longest.dtype),
        message=f"A target of `score_targets` must be shorter than the model's max_length "
        f"({positions}), its [START] included",
    )
    with tf.control_dependencies([fits]):
        lengths = context_ids.row_lengths() + target_lengths

    def score(rows, index):
        del index  # the same pass for every sub-batch
        context = tf.gather(context_ids, rows).to_tensor()
        log_probs, scored = token_log_probs(model, context, tf.gather(target_ids, rows))
        # Every sub-batch as wide as the longest target the model can take.
        padded = tf.pad(log_probs, [[0, 0], [0, positions - tf.shape(log_probs)[1]]])
        return tf.reduce_sum(log_probs, axis=1), scored, padded

    scores, scored, token_scores = sub_batches.map_sub_batches(
        score,
        lengths,
        [(tf.float32, [None]), (tf.int32, [None]), (tf.float32, [None, positions])],
        sub_batch_size,
    )
    widest = tf.reduce_max(tf.pad(scored, [[0, 1]]))
    return ScoreResult(scores, scored, token_scores[:, :widest])


def normalized_scores(result: ScoreResult, alpha: float, normalization: str = "gnmt"):
    """`result.scores` as beam search ranks finished hypotheses: divided by the GNMT
    length penalty of their lengths (`beam.length_penalty`), or with `normalization`
    "transformers" by length ** `alpha`, as transformers' `generate()` does."""
    if normalization == "transformers":
        return result.scores / tf.pow(tf.cast(result.lengths, tf.float32), alpha)
    return result.scores / length_penalty(result.lengths, alpha)
