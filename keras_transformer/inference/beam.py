"""Beam search over the decoder's key/value cache, with the GNMT length penalty.

The same kind of loop as greedy search and sampling (one `tf.while_loop`, batched,
over the model's step interface, its attention form chosen by rows, `fixed_shapes`
for XLA; `search.py`), with state of its own: each row's `width` best unfinished hypotheses and
`width` best finished ones (`_Beams`). Each step keeps the best continuations
(`candidates.best_candidates`), reorders the self-attention caches to follow
them (`reorder_decoding_state`), and, over many rows, drops the sentences whose
search is done (`keep_decoding_rows`).

The module holds the beams' state, their step, the stopping rule and the choice of
the k best finished hypotheses (n-best lists), which keep one invariant: once the
search stops, no unfinished hypothesis beats a finished one. The candidates' ranking
is `candidates.py`; the loop shared with greedy search is `search.py`. The state, the
step and the stopping rule stay in one module because together they keep that
invariant.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import tensorflow as tf

from keras_transformer.constants import END_ID
from keras_transformer.inference import candidates
from keras_transformer.inference.search import (
    DecodeResult,
    Search,
    attention_form_by_rows,
    free_leading_dims,
    start_buffer,
    state_invariant,
    write_column,
)


def length_penalty(length, alpha: float):
    """GNMT length penalty (Wu et al., 2016): ((5 + length) / 6) ** alpha."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def check_length_penalty(alpha: float) -> None:
    """The search stops a row once no unfinished hypothesis can beat its best finished
    one, a bound that holds only while the penalty grows with length: alpha >= 0."""
    if not (math.isfinite(alpha) and alpha >= 0):
        raise ValueError(
            f"`length_penalty_alpha` must be a finite number >= 0 (0: no penalty). "
            f"Received: {alpha}"
        )


class _Beams(NamedTuple):
    """Beam search's bookkeeping, `(batch, width, ...)` each.

    alive_*: the `width` best hypotheses that have not ended, by log-probability.
    finished_*: the `width` best that ended with [END], by penalized score.
    """

    alive_seq: tf.Tensor  # int64 (batch, width, steps + 1), [START] first
    alive_log_prob: tf.Tensor  # float32 (batch, width)
    finished_seq: tf.Tensor  # int64 (batch, width, steps + 1)
    finished_score: tf.Tensor  # float32 (batch, width): log-probability / length penalty
    finished_log_prob: tf.Tensor  # float32 (batch, width)
    finished_length: tf.Tensor  # int32 (batch, width), [END] included

    @classmethod
    def start(cls, batch, width, steps: int) -> _Beams:
        alive_seq = start_buffer([batch, width], steps)
        # Only beam 0 is live at first, so the first step does not pick one token `width` times.
        first = tf.where(tf.range(width) == 0, 0.0, -math.inf)
        return cls(
            alive_seq=alive_seq,
            alive_log_prob=tf.tile(first[None, :], [batch, 1]),
            finished_seq=tf.zeros_like(alive_seq),
            finished_score=tf.fill([batch, width], -math.inf),
            finished_log_prob=tf.zeros([batch, width]),
            finished_length=tf.zeros([batch, width], tf.int32),
        )


def _top(values, k, *gathered):
    """The `k` largest `values` along the last axis, and `gathered` taken at the same places."""
    top_values, index = tf.math.top_k(values, k=k)
    return (top_values,) + tuple(tf.gather(g, index, batch_dims=1) for g in gathered)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class BeamSearch(Search):
    """Beam search with the GNMT length penalty; returns the best hypothesis per row,
    or its `num_hypotheses` best (an n-best list).

    Hypotheses are ranked by log-probability / ((5 + length) / 6) ** alpha
    (alpha 0: plain log-probability). Each step keeps the `beam_width` best
    unfinished hypotheses; one that emits [END] joins the row's finished list.
    A row stops when no unfinished hypothesis can still beat its best finished
    one (its k-th best, for an n-best list of k). The returned `scores` are plain
    log-probabilities (of the whole output, a target prefix included). From
    `MATMUL_ATTENTION_ROWS` hypotheses on, the loop steps only the sentences
    still searching, with the same results. With a target prefix (the call's
    `prefix`), the hypotheses of a row within its prefix may only continue with
    the prefix's next token.

    Args:
        max_length, stop_at_end, use_cache, fixed_shapes: as for `Search`; at its
            row limit every hypothesis of a row ends with [END], with
            `stop_at_end` or without.
        beam_width: int, or int32 scalar tensor (it may vary between calls of one
            traced function; it is then checked in the graph). Defaults to 4.
        length_penalty_alpha: float >= 0. 0 disables the penalty. Defaults to 0.6.
        num_hypotheses: int or int32 scalar tensor k, 1 <= k <= `beam_width`
            (a tensor is checked in the graph), or None. With k, the result has
            a hypothesis axis: each row's k best hypotheses, best first (tokens
            `(batch, k, max_length)`, lengths and scores `(batch, k)`): those
            that ended, and, in a row that ran out of steps, those still going
            (complete at the length limit). The first is the hypothesis the
            search returns without `num_hypotheses`. A row with fewer than k
            hypotheses (one whose limit or prefix leaves fewer) fills the rest
            with empty ones scored -inf. Defaults to None: the best, without
            the hypothesis axis.

    Example:
    >>> search = BeamSearch(beam_width=4, max_length=32)
    >>> result = search(model, context_ids)  # the best hypothesis of each row
    >>> nbest = search.replace(num_hypotheses=3)(model, context_ids)  # tokens (rows, 3, 32)
    """

    beam_width: int | tf.Tensor = 4
    length_penalty_alpha: float = 0.6
    num_hypotheses: int | tf.Tensor | None = None

    def __post_init__(self):
        super().__post_init__()
        beam_width, k = self.beam_width, self.num_hypotheses
        if isinstance(beam_width, int) and beam_width <= 0:
            raise ValueError(f"`beam_width` must be a positive integer. Received: {beam_width}")
        if isinstance(k, int) and not (
            1 <= k and (not isinstance(beam_width, int) or k <= beam_width)
        ):
            raise ValueError(
                f"`num_hypotheses` must be between 1 and `beam_width` ({beam_width}). "
                f"Received: num_hypotheses={k}"
            )
        check_length_penalty(self.length_penalty_alpha)

    def _search(self, model, context_ids, steps, row_limits, fused_weights, stream, forced):
        beam_width, length_penalty_alpha = self.beam_width, self.length_penalty_alpha
        stop_at_end, use_cache = self.stop_at_end, self.use_cache
        fixed_shapes = self.fixed_shapes
        width = tf.cast(beam_width, tf.int32)
        if not isinstance(beam_width, int):
            # A width given as a tensor (an export's `translate_beam`) is checked in the graph,
            # before anything uses it.
            check = tf.debugging.assert_positive(width, message="beam_width must be positive")
            with tf.control_dependencies([check]):
                width = tf.identity(width)
        k = self._checked_hypotheses(width)
        vocab = model.target_vocab_size
        batch = tf.shape(context_ids)[0]
        # Hypothesis k of row b is row b * width + k of the state.
        state = model.decoding_start(
            context_ids,
            steps,
            use_cache,
            beam_width=width,
            fixed_shapes=fixed_shapes,
            fused_weights=fused_weights,
        )
        max_penalty = length_penalty(steps, length_penalty_alpha)

        def done(beams):
            """Per row: no unfinished hypothesis can beat the best finished one (the k-th
            best, for k hypotheses). The best an unfinished one can reach: its
            log-probability can only fall, and the penalty grows at most to its value
            at max length."""
            if k is None or isinstance(k, int):
                kth = beams.finished_score[:, (k or 1) - 1]
            else:
                kth = tf.gather(beams.finished_score, k - 1, axis=1)
            return kth >= beams.alive_log_prob[:, 0] / max_penalty

        def advance(i, beams, state, limits, prefix_tokens, matmul_attention):
            """One step of `beams`' rows: the new beams, the state (the step's, in the
            old order) and the state's rows for the new order."""
            rows_now = tf.shape(beams.alive_log_prob)[0]
            tokens = tf.reshape(beams.alive_seq, [rows_now * width, steps + 1])
            logits, state = model.decoding_step(tokens, i, state, matmul_attention)
            # The loop's state has no static shapes; the candidates' selection needs
            # the vocabulary's.
            logits = tf.ensure_shape(logits, [None, vocab])
            # At its limit a row may only end: every other token is ruled out; within
            # its prefix, a row may only take the prefix's token.
            must_end = None if limits is None else i + 1 >= limits
            row_forced = prefix_tokens
            if must_end is not None:
                none = -tf.ones_like(must_end, tf.int64) if row_forced is None else row_forced
                row_forced = tf.where(must_end, tf.constant(END_ID, tf.int64), none)
            # 2 * width candidates leave `width` unfinished ones even if `width` end here.
            top_log_prob, parent, token = candidates.best_candidates(
                logits, beams.alive_log_prob, 2 * width, row_forced
            )
            seqs = write_column(tf.gather(beams.alive_seq, parent, batch_dims=1), i + 1, token)
            ends = tf.logical_and(tf.equal(token, END_ID), stop_at_end)
            if must_end is not None:  # at its limit a row ends, even where [END] is ordinary
                ends = tf.logical_or(ends, must_end[:, None])

            alive_log_prob, alive_seq, alive_parent = _top(
                tf.where(ends, -math.inf, top_log_prob), width, seqs, parent
            )
            rows = tf.reshape(alive_parent + tf.range(rows_now)[:, None] * width, [-1])

            length = i + 1
            end_score = tf.where(
                ends, top_log_prob / length_penalty(length, length_penalty_alpha), -math.inf
            )
            finished_score, finished_seq, finished_log_prob, finished_length = _top(
                tf.concat([beams.finished_score, end_score], axis=1),
                width,
                tf.concat([beams.finished_seq, seqs], axis=1),
                tf.concat([beams.finished_log_prob, top_log_prob], axis=1),
                tf.concat([beams.finished_length, tf.fill(tf.shape(end_score), length)], axis=1),
            )
            beams = _Beams(
                alive_seq,
                alive_log_prob,
                finished_seq,
                finished_score,
                finished_log_prob,
                finished_length,
            )
            return beams, state, rows

        def start():
            """The first beams, and the loop invariants of `(i, beams, state)`."""
            beams = _Beams.start(batch, width, steps)
            # The beam axis is dynamic when `beam_width` is a tensor.
            invariants = (
                tf.TensorShape([]),
                tf.nest.map_structure(lambda t: free_leading_dims(t, 2), beams),
                tf.nest.map_structure(state_invariant, state),
            )
            return beams, invariants

        def loop(matmul_attention):
            def cond(i, beams, state):
                all_done = tf.reduce_all(done(beams))
                return tf.logical_and(i < steps, tf.logical_not(all_done))

            def body(i, beams, state):
                prefix_tokens = None if forced is None else forced[:, i]
                beams, state, rows = advance(
                    i, beams, state, row_limits, prefix_tokens, matmul_attention
                )
                return i + 1, beams, model.reorder_decoding_state(state, rows)

            beams, invariants = start()
            i, beams, _ = tf.while_loop(
                cond, body, (tf.constant(0), beams, state), shape_invariants=invariants
            )
            return i, beams

        def live_rows_loop(matmul_attention):
            """The loop over the sentences still searching: a sentence whose best finished
            hypothesis no unfinished one can beat leaves the state (its other
            hypotheses would be stepped on for nothing); its beams keep their place
            in the full-batch ones."""

            def cond(i, beams, state, live):
                return tf.logical_and(i < steps, tf.size(live) > 0)

            def body(i, beams, state, live):
                limits = None if row_limits is None else tf.gather(row_limits, live)
                prefix_tokens = None if forced is None else tf.gather(forced[:, i], live)
                part = tf.nest.map_structure(lambda t: tf.gather(t, live), beams)
                part, state, rows = advance(i, part, state, limits, prefix_tokens, matmul_attention)
                beams = tf.nest.map_structure(
                    lambda whole, new: tf.tensor_scatter_nd_update(whole, live[:, None], new),
                    beams,
                    part,
                )
                going = tf.logical_not(done(part))

                def drop_done():
                    kept = tf.where(going)[:, 0]
                    # Cross-attention's rows are alike within a sentence, so the reorder's
                    # rows serve it too.
                    kept_rows = tf.reshape(tf.gather(tf.reshape(rows, [-1, width]), kept), [-1])
                    return model.keep_decoding_rows(state, kept_rows), tf.gather(live, kept)

                state, live = tf.cond(
                    tf.reduce_all(going),
                    lambda: (model.reorder_decoding_state(state, rows), live),
                    drop_done,
                )
                return i + 1, beams, state, live

            beams, invariants = start()
            i, beams, _, _ = tf.while_loop(
                cond,
                body,
                (tf.constant(0), beams, state, tf.range(batch)),
                shape_invariants=invariants + (tf.TensorShape([None]),),
            )
            return i, beams

        def loop_by_form(matmul_attention):
            if matmul_attention and stop_at_end:
                return live_rows_loop(matmul_attention)
            return loop(matmul_attention)

        i, beams = attention_form_by_rows(
            batch * width, loop_by_form, use_cache and not fixed_shapes
        )
        if k is not None:
            return _best_hypotheses(beams, i, k, done(beams), length_penalty_alpha)
        # A row whose hypotheses all ran to max length has no finished one: take
        # the best unfinished hypothesis when it ranks above the best finished one.
        alive_score = beams.alive_log_prob[:, 0] / length_penalty(i, length_penalty_alpha)
        use_alive = alive_score > beams.finished_score[:, 0]
        tokens = tf.where(
            use_alive[:, None], beams.alive_seq[:, 0, 1:], beams.finished_seq[:, 0, 1:]
        )
        lengths = tf.where(use_alive, i, beams.finished_length[:, 0])
        scores = tf.where(use_alive, beams.alive_log_prob[:, 0], beams.finished_log_prob[:, 0])
        return DecodeResult(tokens, lengths, scores)

    def _checked_hypotheses(self, width):
        """`num_hypotheses` as given, checked in the graph when it or the width is a
        tensor (`checked_num_hypotheses`), or None."""
        k = self.num_hypotheses
        if k is None or (isinstance(k, int) and isinstance(self.beam_width, int)):
            return k
        return checked_num_hypotheses(k, width)


def checked_num_hypotheses(num_hypotheses, beam_width):
    """`num_hypotheses` as an int32 tensor that fails (InvalidArgumentError) unless
    1 <= it <= `beam_width`: the graph's check of an n-best list's size."""
    k = tf.cast(num_hypotheses, tf.int32)
    message = "num_hypotheses must be between 1 and beam_width"
    checks = [
        tf.debugging.assert_positive(k, message=message),
        tf.debugging.assert_less_equal(k, tf.cast(beam_width, tf.int32), message=message),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(k)


def _best_hypotheses(beams, steps_run, k, done, alpha: float) -> DecodeResult:
    """Each row's `k` best hypotheses, best first (`BeamSearch`'s `num_hypotheses`): the
    finished ones, and the unfinished ones of rows not `done` (they ran out of steps
    and end at the length limit), those ranked by their penalized log-probability at
    `steps_run` tokens. Finished ones come first among equals, as without
    `num_hypotheses`; slots no hypothesis fills get no tokens, length 0 and -inf."""
    alive_score = beams.alive_log_prob / length_penalty(steps_run, alpha)
    alive_score = tf.where(done[:, None], -math.inf, alive_score)
    alive_length = tf.fill(tf.shape(beams.alive_log_prob), steps_run)
    score, seq, log_prob, length = _top(
        tf.concat([beams.finished_score, alive_score], axis=1),
        k,
        tf.concat([beams.finished_seq, beams.alive_seq], axis=1)[:, :, 1:],
        tf.concat([beams.finished_log_prob, beams.alive_log_prob], axis=1),
        tf.concat([beams.finished_length, alive_length], axis=1),
    )
    found = score > -math.inf
    return DecodeResult(
        tf.where(found[:, :, None], seq, tf.zeros_like(seq)),
        tf.where(found, length, 0),
        tf.where(found, log_prob, -math.inf),
    )


def beam_search(
    model,
    context_ids,
    beam_width=4,
    max_length: int | None = None,
    length_penalty_alpha: float = 0.6,
    stop_at_end: bool = True,
    use_cache: bool = True,
    row_limits=None,
    fixed_shapes: bool = False,
    fused_weights=None,
    num_hypotheses=None,
    prefix=None,
) -> DecodeResult:
    """Beam search with the GNMT length penalty (`BeamSearch` as a function).

    Args:
        model: a built `Transformer`.
        context_ids: int `(batch, source_length)`.
        beam_width, length_penalty_alpha, num_hypotheses: as for `BeamSearch`.
        max_length, stop_at_end, use_cache, fixed_shapes: as for `Search`.
        row_limits, fused_weights, prefix: as for a `Search`'s call (with a
            prefix, the scores are the whole output's log-probability, prefix
            included).
    """
    search = BeamSearch(
        max_length=max_length,
        stop_at_end=stop_at_end,
        use_cache=use_cache,
        fixed_shapes=fixed_shapes,
        beam_width=beam_width,
        length_penalty_alpha=length_penalty_alpha,
        num_hypotheses=num_hypotheses,
    )
    return search(
        model, context_ids, row_limits=row_limits, fused_weights=fused_weights, prefix=prefix
    )
