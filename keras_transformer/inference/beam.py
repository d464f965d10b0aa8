"""Beam search over the decoder's key/value cache, with the GNMT length penalty or
transformers' length normalization and early stopping.

The same kind of loop as greedy search and sampling (one `tf.while_loop`, batched,
over the model's step interface, its attention form chosen by rows, `fixed_shapes`
for XLA; `search.py`), with state of its own: each row's `width` best unfinished hypotheses and
`width` best finished ones (`_Beams`). Each step keeps the best continuations
(`candidates.best_candidates`), reorders the self-attention caches to follow
them (`reorder_decoding_state`), and, over many rows, drops the sentences whose
search is done (`keep_decoding_rows`).

The module holds the beams' state, their step, the stopping rules and the choice of
the k best finished hypotheses (n-best lists). With the GNMT penalty they keep one
invariant: once the search stops, no unfinished hypothesis beats a finished one. With
transformers' rules (`length_normalization="transformers"`) they are those of
transformers' `generate()` (5.x `_beam_search`), so that an imported checkpoint decodes
as it does there. The candidates' ranking is `candidates.py`; the loop shared with
greedy search is `search.py`. The state, the step and the stopping rules stay in one
module because together they decide which hypotheses a row returns.
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
    first_token_forcing,
    free_leading_dims,
    start_buffer,
    state_invariant,
    write_column,
)


def length_penalty(length, alpha: float):
    """GNMT length penalty (Wu et al., 2016): ((5 + length) / 6) ** alpha."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def transformers_length_penalty(length, exponent: float):
    """transformers' length normalization: length ** exponent (its `length_penalty`),
    the power taken in float64 as Python's `**` takes it there."""
    return tf.cast(tf.pow(tf.cast(length, tf.float64), float(exponent)), tf.float32)


# How finished hypotheses are ranked (`BeamSearch`'s `length_normalization`).
LENGTH_NORMALIZATIONS = ("gnmt", "transformers")


def check_length_penalty(alpha: float) -> None:
    """The search stops a row once no unfinished hypothesis can beat its best finished
    one, a bound that holds only while the penalty grows with length: alpha >= 0."""
    if not (math.isfinite(alpha) and alpha >= 0):
        raise ValueError(
            f"`length_penalty_alpha` must be a finite number >= 0 (0: no penalty). "
            f"Received: {alpha}"
        )


def check_beam_settings(
    length_penalty_alpha: float, length_normalization: str = "gnmt", early_stopping=False
) -> None:
    """A beam search's ranking settings (`BeamSearch`'s): a known `length_normalization`
    and `early_stopping`; `length_penalty_alpha` >= 0 for GNMT's penalty, any finite
    exponent for transformers' (a negative one favours short hypotheses)."""
    if length_normalization not in LENGTH_NORMALIZATIONS:
        raise ValueError(
            f"`length_normalization` must be one of {', '.join(LENGTH_NORMALIZATIONS)}. "
            f"Received: length_normalization={length_normalization!r}"
        )
    if not (isinstance(early_stopping, bool) or early_stopping == "never"):
        raise ValueError(
            "`early_stopping` must be True, False or 'never'. "
            f"Received: early_stopping={early_stopping!r}"
        )
    if length_normalization == "gnmt":
        check_length_penalty(length_penalty_alpha)
    elif not math.isfinite(length_penalty_alpha):
        raise ValueError(
            f"`length_penalty_alpha` must be a finite number. Received: {length_penalty_alpha}"
        )


class _Beams(NamedTuple):
    """Beam search's bookkeeping, `(batch, width, ...)` each.

    alive_*: the `width` best hypotheses that have not ended, by log-probability.
    finished_*: the `width` best that ended with [END], by penalized score.
    closed: bool `(batch,)`, the rows whose finished hypotheses may no longer
        change (transformers' rules; GNMT's leave it False).
    """

    alive_seq: tf.Tensor  # int64 (batch, width, steps + 1), [START] first
    alive_log_prob: tf.Tensor  # float32 (batch, width)
    finished_seq: tf.Tensor  # int64 (batch, width, steps + 1)
    finished_score: tf.Tensor  # float32 (batch, width): log-probability / length penalty
    finished_log_prob: tf.Tensor  # float32 (batch, width)
    finished_length: tf.Tensor  # int32 (batch, width), [END] included
    closed: tf.Tensor  # bool (batch,)

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
            closed=tf.zeros([batch], tf.bool),
        )


def _top(values, k, *gathered):
    """The `k` largest `values` along the last axis, and `gathered` taken at the same places."""
    top_values, index = tf.math.top_k(values, k=k)
    return (top_values,) + tuple(tf.gather(g, index, batch_dims=1) for g in gathered)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class BeamSearch(Search):
    """Beam search with the GNMT length penalty or transformers' length normalization;
    returns the best hypothesis per row, or its `num_hypotheses` best (an n-best list).

    With GNMT's penalty (the default: runs trained here were tuned with it),
    hypotheses are ranked by log-probability / ((5 + length) / 6) ** alpha (alpha
    0: plain log-probability). Each step keeps the `beam_width` best unfinished
    hypotheses; one that emits [END] joins the row's finished list. A row stops
    when no unfinished hypothesis can still beat its best finished one (its k-th
    best, for an n-best list of k).

    With transformers' (`length_normalization="transformers"`), the search is
    transformers' `generate()` beam search (5.x), so that a checkpoint imported
    with its generation settings decodes as it does there: hypotheses are ranked
    by log-probability / length ** `length_penalty_alpha` (its `length_penalty`;
    length: the tokens generated, [END] included). Of a step's 2 * `beam_width`
    best continuations (by log-probability), those among the first `beam_width`
    that end join the finished list, and the `beam_width` best that do not end
    go on. At a row's last step (`max_length`, or its row limit) its best
    continuations are finished whatever their last token, and the [END] a row
    limit forces has log-probability 0, as transformers' `forced_eos_token_id`
    gives it. A row stops as `early_stopping` says: True, once it has
    `beam_width` finished hypotheses; False, once its best unfinished one, scored
    at its current length, does not beat its worst finished one (a heuristic:
    with a positive exponent, a longer one may still score better); "never",
    once it could not at the longest length it may reach (its current length,
    unless the exponent is positive): no hypothesis that could win is left out.
    The result is the finished list's first (its first k with `num_hypotheses`).

    The returned `scores` are plain log-probabilities (of the whole output, a
    target prefix included; forced tokens count as `Search` says). From
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
        length_penalty_alpha: float. GNMT's alpha, >= 0 (0 disables the
            penalty), or transformers' `length_penalty` exponent, any finite
            number (0: plain log-probability; negative favours short
            hypotheses). Defaults to 0.6.
        length_normalization: "gnmt" or "transformers" (see above). Defaults to
            "gnmt".
        early_stopping: True, False or "never": transformers' stopping rule
            (see above); GNMT's ranking ignores it. Defaults to False
            (transformers' default).
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
    >>> opus_mt = BeamSearch(length_normalization="transformers", length_penalty_alpha=1.0,
    ...                      early_stopping=True, max_length=511)
    """

    beam_width: int | tf.Tensor = 4
    length_penalty_alpha: float = 0.6
    length_normalization: str = "gnmt"
    early_stopping: bool | str = False
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
        check_beam_settings(
            self.length_penalty_alpha, self.length_normalization, self.early_stopping
        )

    def _search(
        self, model, context_ids, steps, row_limits, fused_weights, stream, forced, forced_first
    ):
        beam_width, length_penalty_alpha = self.beam_width, self.length_penalty_alpha
        stop_at_end, use_cache = self.stop_at_end, self.use_cache
        fixed_shapes = self.fixed_shapes
        transformers = self.length_normalization == "transformers"
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
            at max length. transformers' rules close a row as they stop it."""
            if transformers:
                return beams.closed
            if k is None or isinstance(k, int):
                kth = beams.finished_score[:, (k or 1) - 1]
            else:
                kth = tf.gather(beams.finished_score, k - 1, axis=1)
            return kth >= beams.alive_log_prob[:, 0] / max_penalty

        def advance(i, beams, state, limits, prefix_tokens, first, matmul_attention):
            """One step of `beams`' rows: the new beams, the state (the step's, in the
            old order) and the state's rows for the new order."""
            rows_now = tf.shape(beams.alive_log_prob)[0]
            tokens = tf.reshape(beams.alive_seq, [rows_now * width, steps + 1])
            logits, state = model.decoding_step(tokens, i, state, matmul_attention)
            # The loop's state has no static shapes; the candidates' selection needs
            # the vocabulary's.
            logits = tf.ensure_shape(logits, [None, vocab])
            # At its limit a row may only end: every other token is ruled out; within
            # its prefix, a row may only take the prefix's token; at the first step, its
            # forced first token, with log-probability 0 (`free`).
            must_end = None if limits is None else i + 1 >= limits
            row_forced, free = prefix_tokens, None
            if first is not None:
                free = first_token_forcing(first, i)
                none = -tf.ones_like(first) if row_forced is None else row_forced
                row_forced = tf.where(free, first, none)
            if must_end is not None:
                none = -tf.ones_like(must_end, tf.int64) if row_forced is None else row_forced
                row_forced = tf.where(must_end, tf.constant(END_ID, tf.int64), none)
                if transformers:  # forced_eos_token_id's [END]: log-probability 0
                    free = must_end if free is None else tf.logical_or(free, must_end)
                elif free is not None:
                    free = tf.logical_and(free, tf.logical_not(must_end))
            # 2 * width candidates leave `width` unfinished ones even if `width` end here.
            top_log_prob, parent, token = candidates.best_candidates(
                logits, beams.alive_log_prob, 2 * width, row_forced, free
            )
            seqs = write_column(tf.gather(beams.alive_seq, parent, batch_dims=1), i + 1, token)
            ends = tf.logical_and(tf.equal(token, END_ID), stop_at_end)
            if must_end is not None:  # at its limit a row ends, even where [END] is ordinary
                ends = tf.logical_or(ends, must_end[:, None])
            if transformers:  # and at max length (transformers' MaxLengthCriteria)
                ends = tf.logical_or(ends, i + 1 >= steps)

            alive_log_prob, alive_seq, alive_parent = _top(
                tf.where(ends, -math.inf, top_log_prob), width, seqs, parent
            )
            rows = tf.reshape(alive_parent + tf.range(rows_now)[:, None] * width, [-1])

            length = i + 1
            if transformers:
                finished = _transformers_finished(
                    beams, ends, top_log_prob, seqs, length, width, self
                )
                longest = steps if limits is None else tf.minimum(limits, steps)
                closed = _transformers_closed(
                    beams.closed, finished[0], alive_log_prob[:, 0], length, longest, self
                )
            else:
                end_score = tf.where(
                    ends, top_log_prob / length_penalty(length, length_penalty_alpha), -math.inf
                )
                finished = _top(
                    tf.concat([beams.finished_score, end_score], axis=1),
                    width,
                    tf.concat([beams.finished_seq, seqs], axis=1),
                    tf.concat([beams.finished_log_prob, top_log_prob], axis=1),
                    tf.concat(
                        [beams.finished_length, tf.fill(tf.shape(end_score), length)], axis=1
                    ),
                )
                closed = beams.closed
            finished_score, finished_seq, finished_log_prob, finished_length = finished
            beams = _Beams(
                alive_seq,
                alive_log_prob,
                finished_seq,
                finished_score,
                finished_log_prob,
                finished_length,
                closed,
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
                    i, beams, state, row_limits, prefix_tokens, forced_first, matmul_attention
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
                first = None if forced_first is None else tf.gather(forced_first, live)
                part = tf.nest.map_structure(lambda t: tf.gather(t, live), beams)
                part, state, rows = advance(
                    i, part, state, limits, prefix_tokens, first, matmul_attention
                )
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

        def loop_by_form(many_rows, matmul_attention):
            if many_rows and stop_at_end:
                return live_rows_loop(matmul_attention)
            return loop(matmul_attention)

        i, beams = attention_form_by_rows(
            batch * width, loop_by_form, use_cache and not fixed_shapes, self.matmul_attention
        )
        if transformers:
            # Every row ended at its last step at the latest: the finished list is the result.
            result = _ranked_hypotheses(
                1 if k is None else k,
                beams.finished_score,
                beams.finished_seq,
                beams.finished_log_prob,
                beams.finished_length,
            )
            if k is None:
                return DecodeResult(result.tokens[:, 0], result.lengths[:, 0], result.scores[:, 0])
            return result
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


def _transformers_finished(beams, ends, log_prob, seqs, length, width, search: BeamSearch):
    """transformers' `_update_finished_beams`: of a step's candidates (`log_prob`,
    `seqs`, best first), those among the first `width` that `ends` join the finished
    hypotheses, scored log-probability / `length` ** exponent, unless their row is
    closed or, with `early_stopping` True, has `width` finished already. The others
    are only there so that `width` unfinished ones go on.

    Returns the new `(finished_score, finished_seq, finished_log_prob,
    finished_length)`, best first.
    """
    among_first = tf.range(tf.shape(log_prob)[1])[None, :] < width
    takes = tf.logical_not(beams.closed)
    if search.early_stopping is True:
        full = tf.reduce_all(beams.finished_score > -math.inf, axis=1)
        takes = tf.logical_and(takes, tf.logical_not(full))
    joins = tf.logical_and(tf.logical_and(ends, among_first), takes[:, None])
    penalty = transformers_length_penalty(length, search.length_penalty_alpha)
    score = tf.where(joins, log_prob / penalty, -math.inf)
    return _top(
        tf.concat([beams.finished_score, score], axis=1),
        width,
        tf.concat([beams.finished_seq, seqs], axis=1),
        tf.concat([beams.finished_log_prob, log_prob], axis=1),
        tf.concat([beams.finished_length, tf.fill(tf.shape(score), length)], axis=1),
    )


def _transformers_closed(closed, finished_score, best_alive, length, longest, search: BeamSearch):
    """The rows transformers' rules stop after a step (`_check_early_stop_heuristic` and
    `_beam_search_has_unfinished_sequences`, per row), `closed` before it included: a
    row whose finished hypotheses are all there (`width` of them) and whose best
    unfinished one (`best_alive`, `length` tokens) would not beat the worst of them,
    scored at its current length, or, with `early_stopping` "never" and a positive
    exponent, at the longest it may reach (`longest`); with `early_stopping` True, a
    row whose finished hypotheses are all there; and a row with no unfinished one
    left."""
    alpha = search.length_penalty_alpha
    full = tf.reduce_all(finished_score > -math.inf, axis=1)
    reach = longest if search.early_stopping == "never" and alpha > 0 else length
    best_possible = best_alive / transformers_length_penalty(reach, alpha)
    no_better = tf.logical_and(full, best_possible <= tf.reduce_min(finished_score, axis=1))
    stops = tf.logical_or(no_better, tf.equal(best_alive, -math.inf))
    if search.early_stopping is True:
        stops = tf.logical_or(stops, full)
    return tf.logical_or(closed, stops)


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
    return _ranked_hypotheses(
        k,
        tf.concat([beams.finished_score, alive_score], axis=1),
        tf.concat([beams.finished_seq, beams.alive_seq], axis=1),
        tf.concat([beams.finished_log_prob, beams.alive_log_prob], axis=1),
        tf.concat([beams.finished_length, alive_length], axis=1),
    )


def _ranked_hypotheses(k, score, seq, log_prob, length) -> DecodeResult:
    """The `k` best of hypotheses ranked by `score` (`(batch, n)`; `seq` with its
    [START]), as a `DecodeResult` with a hypothesis axis; slots no hypothesis fills
    (score -inf) get no tokens, length 0 and -inf."""
    score, seq, log_prob, length = _top(score, k, seq[:, :, 1:], log_prob, length)
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
    length_normalization: str = "gnmt",
    early_stopping=False,
    forced_first=None,
) -> DecodeResult:
    """Beam search with the GNMT length penalty or transformers' length normalization
    (`BeamSearch` as a function).

    Args:
        model: a built `Transformer`.
        context_ids: int `(batch, source_length)`.
        beam_width: as for `BeamSearch`, and so are `length_penalty_alpha`,
            `num_hypotheses`, `length_normalization` and `early_stopping`.
        max_length, stop_at_end, use_cache, fixed_shapes: as for `Search`.
        row_limits, fused_weights, prefix, forced_first: as for a `Search`'s call
            (with a prefix, the scores are the whole output's log-probability,
            prefix included).
    """
    search = BeamSearch(
        max_length=max_length,
        stop_at_end=stop_at_end,
        use_cache=use_cache,
        fixed_shapes=fixed_shapes,
        beam_width=beam_width,
        length_penalty_alpha=length_penalty_alpha,
        length_normalization=length_normalization,
        early_stopping=early_stopping,
        num_hypotheses=num_hypotheses,
    )
    return search(
        model,
        context_ids,
        row_limits=row_limits,
        fused_weights=fused_weights,
        prefix=prefix,
        forced_first=forced_first,
    )
