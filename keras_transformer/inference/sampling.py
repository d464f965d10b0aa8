"""Greedy search and sampling: one token per row per step, over the decoder's cache.

Both are the one loop (`_token_search`), differing in how a step chooses its token:
the most likely one (`GreedySearch`) or one drawn from the filtered distribution
(`SamplingSearch`). The loop comes in two forms, one stepping every row and one only
the rows still decoding (greedy search over many rows), which share the buffers, the
row limits and the invariants (`search.py`). `greedy_search` and `sample` are the
searches as functions. The module stays whole (about 430 lines) because the two
searches are that one loop: split by search, each half would hold a copy of it or
reach into the other's.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from keras_transformer.constants import END_ID, PAD_ID
from keras_transformer.inference.search import (
    DecodeResult,
    Search,
    attention_form_by_rows,
    first_token_forcing,
    free_leading_dims,
    start_buffer,
    state_invariant,
    without_never_emitted,
    write_column,
)


def _token_search(
    model,
    context_ids,
    steps: int,
    choose,
    stop_at_end: bool,
    use_cache: bool,
    return_logits: bool,
    row_limits=None,
    fixed_shapes: bool = False,
    drop_ended_rows: bool = False,
    fused_weights=None,
    forced=None,
    forced_first=None,
    matmul_attention: bool = True,
) -> DecodeResult:
    """`steps` tokens at most per row, one a step, chosen by `choose(logits, step) -> int64 ids`.

    A row whose `row_limits` entry is reached gets [END] as its last token; a row
    with a target prefix (`forced`: `search.prefix_forcing`'s tokens) takes the
    prefix's token at each step within it, and a row with a forced first token
    (`forced_first`, int64, 0 for none) takes it at the first step, with
    log-probability 0. Without them, the loops hold no op for them.
    With `drop_ended_rows`, a search of many rows (`attention_form_by_rows`) steps only the
    rows still decoding: `choose` must pick each row's token from its logits alone
    (greedy), as rows change places when others leave.
    """
    batch = tf.shape(context_ids)[0]
    vocab = model.target_vocab_size
    start_tokens = start_buffer([batch], steps)  # (batch, steps + 1)
    state = model.decoding_start(
        context_ids, steps, use_cache, fixed_shapes=fixed_shapes, fused_weights=fused_weights
    )

    def loop(matmul_attention):
        def cond(i, tokens, state, done, scores, lengths, logits_array):
            return tf.logical_and(i < steps, tf.logical_not(tf.reduce_all(done)))

        def body(i, tokens, state, done, scores, lengths, logits_array):
            logits, state = model.decoding_step(tokens, i, state, matmul_attention)
            log_probs = tf.nn.log_softmax(logits, axis=-1)
            ids = choose(without_never_emitted(logits), i)
            if forced is not None:
                ids = _take_forced(ids, forced[:, i])
            ids, first = _take_first(ids, forced_first, i)
            if row_limits is not None:
                ids = tf.where(i + 1 >= row_limits, tf.constant(END_ID, tf.int64), ids)
            ids = tf.where(done, tf.constant(PAD_ID, tf.int64), ids)
            token_log_prob = _forced_free(tf.gather(log_probs, ids, batch_dims=1), first, ids)
            scores += tf.where(done, 0.0, token_log_prob)
            lengths += tf.cast(tf.logical_not(done), tf.int32)
            tokens = write_column(tokens, i + 1, ids)
            if stop_at_end:
                done = tf.logical_or(done, tf.equal(ids, END_ID))
            elif row_limits is not None:  # [END] is an ordinary token, but a limit ends a row
                done = tf.logical_or(done, i + 1 >= row_limits)
            if return_logits:
                logits_array = logits_array.write(i, logits)
            return i + 1, tokens, state, done, scores, lengths, logits_array

        logits_array = tf.TensorArray(
            tf.float32, size=0, dynamic_size=True, element_shape=tf.TensorShape([None, vocab])
        )
        loop_vars = (
            tf.constant(0),
            start_tokens,
            state,
            tf.zeros([batch], tf.bool),
            tf.zeros([batch], tf.float32),
            tf.zeros([batch], tf.int32),
            logits_array,
        )
        # Row-indexed loop values keep their row count free: it is static when the
        # caller's shapes are.
        invariants = tuple(
            None
            if k in (0, 6)
            else tf.nest.map_structure(state_invariant, v)
            if k == 2
            else free_leading_dims(v, 1)
            for k, v in enumerate(loop_vars)
        )
        _, tokens, _, _, scores, lengths, logits_array = tf.while_loop(
            cond, body, loop_vars, shape_invariants=invariants
        )
        if not return_logits:
            return tokens, lengths, scores
        return tokens, lengths, scores, tf.transpose(logits_array.stack(), [1, 0, 2])

    def live_rows_loop(matmul_attention):
        """The loop over the rows still decoding: a row leaves the state at its [END].

        A search steps its rows until the longest ends: at 64 sentences a call, 40%
        of greedy's row-steps decoded rows that had ended (benchmarks/ended_rows.py).
        Leaving costs a gather of the state, on the steps where rows end; a row's
        token, score and length go to its own place in the full-batch buffers.
        """

        def cond(i, tokens, state, live, scores, lengths):
            return tf.logical_and(i < steps, tf.size(live) > 0)

        def body(i, tokens, state, live, scores, lengths):
            logits, state = model.decoding_step(tf.gather(tokens, live), i, state, matmul_attention)
            ids = choose(without_never_emitted(logits), i)
            if forced is not None:
                ids = _take_forced(ids, tf.gather(forced[:, i], live))
            live_first = None if forced_first is None else tf.gather(forced_first, live)
            ids, first = _take_first(ids, live_first, i)
            if row_limits is not None:
                ids = tf.where(
                    i + 1 >= tf.gather(row_limits, live), tf.constant(END_ID, tf.int64), ids
                )
            token_log_prob = _forced_free(
                tf.gather(tf.nn.log_softmax(logits, axis=-1), ids, batch_dims=1), first, ids
            )

            def to_all_rows(values):  # 0 for the rows that ended
                return tf.scatter_nd(live[:, None], values, [batch])

            scores += to_all_rows(token_log_prob)
            lengths += to_all_rows(tf.ones_like(live))
            tokens = write_column(tokens, i + 1, to_all_rows(ids))
            going = tf.not_equal(ids, END_ID)

            def drop_ended():
                kept = tf.where(going)[:, 0]
                return model.keep_decoding_rows(state, kept), tf.gather(live, kept)

            state, live = tf.cond(tf.reduce_all(going), lambda: (state, live), drop_ended)
            return i + 1, tokens, state, live, scores, lengths

        loop_vars = (
            tf.constant(0),
            start_tokens,
            state,
            tf.range(batch),
            tf.zeros([batch], tf.float32),
            tf.zeros([batch], tf.int32),
        )
        invariants = (
            tf.TensorShape([]),
            free_leading_dims(start_tokens, 1),
            tf.nest.map_structure(state_invariant, state),
            tf.TensorShape([None]),
            tf.TensorShape([None]),
            tf.TensorShape([None]),
        )
        _, tokens, _, _, scores, lengths = tf.while_loop(
            cond, body, loop_vars, shape_invariants=invariants
        )
        return tokens, lengths, scores

    def loop_by_form(many_rows, matmul_attention):
        if drop_ended_rows and many_rows and stop_at_end and not return_logits:
            return live_rows_loop(matmul_attention)
        return loop(matmul_attention)

    tokens, lengths, scores, *logits = attention_form_by_rows(
        batch, loop_by_form, use_cache and not fixed_shapes, matmul_attention
    )
    return DecodeResult(tokens[:, 1:], lengths, scores, logits[0] if logits else None)


def _take_forced(ids, forced):
    """`ids` where `forced` (a step's prefix tokens) is -1, else `forced`."""
    return tf.where(forced >= 0, forced, ids)


def _take_first(ids, forced_first, step):
    """`ids` with each row's forced first token at the first step (`forced_first`,
    int64, 0 for none; or None), and the tokens so forced (-1 for none; None
    without `forced_first`), for `_forced_free`."""
    if forced_first is None:
        return ids, None
    first = tf.where(first_token_forcing(forced_first, step), forced_first, -1)
    return tf.where(first >= 0, first, ids), first


def _forced_free(token_log_prob, first, ids):
    """`token_log_prob` with 0 where `_take_first` forced the token `first` (and a row
    limit did not replace it): every other token was masked before the log-softmax."""
    if first is None:
        return token_log_prob
    return tf.where(tf.equal(ids, first), 0.0, token_log_prob)


def _most_likely(logits, step):
    return tf.argmax(logits, axis=-1, output_type=tf.int64)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class GreedySearch(Search):
    """Greedy search: the most likely token at every step.

    Over `MATMUL_ATTENTION_ROWS` rows or more, the loop steps only the rows still
    decoding (a row leaves the state at its [END]), with the same results.

    Args:
        max_length, stop_at_end, use_cache, fixed_shapes: as for `Search`.
        return_logits: bool. Also return each step's logits (`DecodeResult.logits`).
            Defaults to False.

    Example:
    >>> search = GreedySearch(max_length=32)
    >>> result = search(model, context_ids)  # result.tokens: (batch, 32)
    """

    return_logits: bool = False

    def _search(
        self, model, context_ids, steps, row_limits, fused_weights, stream, forced, forced_first
    ):
        return _token_search(
            model,
            context_ids,
            steps,
            _most_likely,
            self.stop_at_end,
            self.use_cache,
            self.return_logits,
            row_limits,
            self.fixed_shapes,
            drop_ended_rows=True,
            fused_weights=fused_weights,
            forced=forced,
            forced_first=forced_first,
            matmul_attention=self.matmul_attention,
        )


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class SamplingSearch(Search):
    """Sampling with temperature, top-k and top-p; the same seed gives the same output.

    Every step draws with the key `(seed, stream)` folded with the step, so no two
    (seed, stream) pairs share their draws: a translator gives each sub-batch its
    stream (the call's `stream`; 0 when it is None). Scores are log-probabilities
    under the unfiltered model distribution.

    Args:
        max_length, stop_at_end, use_cache, fixed_shapes: as for `Search`.
        return_logits: bool. Also return each step's logits. Defaults to False.
        temperature: float > 0. The logits are divided by it. Defaults to 1.
        top_k: int >= 0. Draw among the `top_k` most likely tokens only; 0 keeps
            all. Defaults to 0.
        top_p: float in (0, 1]. Draw within the smallest set of tokens whose
            probability reaches it (nucleus sampling); 1 keeps all. Defaults to 1.
        seed: int, an int pair `(seed, stream)` (the call's `stream` is then
            ignored), or None: a fresh seed at each call. Defaults to None.
    """

    return_logits: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | tuple[int, int] | None = None

    def __post_init__(self):
        super().__post_init__()
        check_sampling(self.temperature, self.top_k, self.top_p)

    def _search(
        self, model, context_ids, steps, row_limits, fused_weights, stream, forced, forced_first
    ):
        seed = self.seed
        if seed is None:
            seed = tf.random.uniform([], maxval=2**31 - 1, dtype=tf.int64)
        key = tf.cast(seed, tf.int64)
        if key.shape.rank == 0:
            # Each stream of a seed draws apart (not seed + stream, whose draws
            # another seed's next stream would repeat).
            given = self.seed is not None and stream is not None
            key = tf.stack([key, tf.cast(stream, tf.int64) if given else tf.constant(0, tf.int64)])

        def choose(logits, step):
            filtered = filter_logits(logits, self.temperature, self.top_k, self.top_p)
            step_seed = tf.random.experimental.stateless_fold_in(key, tf.cast(step, tf.int64))
            drawn = tf.random.stateless_categorical(filtered, 1, seed=step_seed, dtype=tf.int64)
            return drawn[:, 0]

        return _token_search(
            model,
            context_ids,
            steps,
            choose,
            self.stop_at_end,
            self.use_cache,
            self.return_logits,
            row_limits,
            self.fixed_shapes,
            fused_weights=fused_weights,
            forced=forced,
            forced_first=forced_first,
            matmul_attention=self.matmul_attention,
        )


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """Sampling's settings: `temperature` > 0, `top_k` >= 0, `top_p` in (0, 1]."""
    if not temperature > 0:
        raise ValueError(f"`temperature` must be positive. Received: temperature={temperature}")
    if top_k < 0:
        raise ValueError(f"`top_k` must be >= 0. Received: top_k={top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"`top_p` must be in (0, 1]. Received: top_p={top_p}")


def filter_logits(logits, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0):
    """Logits for sampling: divided by `temperature`, then the top-k / top-p (nucleus) cut.

    Tokens outside the top `top_k` logits, or outside the smallest set whose
    probability reaches `top_p`, get -inf. `top_k=0` and `top_p=1` keep all.
    """
    check_sampling(temperature, top_k, top_p)
    logits = logits / temperature
    neg_inf = tf.constant(-math.inf, logits.dtype)
    if top_k:
        k = tf.minimum(top_k, tf.shape(logits)[-1])
        kth = tf.math.top_k(logits, k=k).values[:, -1:]
        logits = tf.where(logits < kth, neg_inf, logits)
    if top_p < 1.0:
        sorted_logits = tf.sort(logits, axis=-1, direction="DESCENDING")
        # Probability mass strictly before each token: the top token is always kept.
        mass_before = tf.cumsum(tf.nn.softmax(sorted_logits, axis=-1), axis=-1, exclusive=True)
        kept = tf.where(mass_before < top_p, sorted_logits, tf.constant(float("inf")))
        threshold = tf.reduce_min(kept, axis=-1, keepdims=True)
        logits = tf.where(logits < threshold, neg_inf, logits)
    return logits


def greedy_search(
    model,
    context_ids,
    max_length: int | None = None,
    stop_at_end: bool = True,
    use_cache: bool = True,
    return_logits: bool = False,
    row_limits=None,
    fixed_shapes: bool = False,
    fused_weights=None,
    prefix=None,
    forced_first=None,
) -> DecodeResult:
    """Greedy decoding: the most likely token at every step (`GreedySearch` as a function).

    Args:
        model: a built `Transformer`.
        context_ids: int `(batch, source_length)` source ids, 0-padded.
        max_length, stop_at_end, use_cache, fixed_shapes: as for `Search`.
        return_logits: also return each step's logits.
        row_limits, fused_weights, prefix, forced_first: as for a `Search`'s call
            (with a prefix, the scores are the whole output's log-probability,
            prefix included).
    """
    search = GreedySearch(
        max_length=max_length,
        stop_at_end=stop_at_end,
        use_cache=use_cache,
        fixed_shapes=fixed_shapes,
        return_logits=return_logits,
    )
    return search(
        model,
        context_ids,
        row_limits=row_limits,
        fused_weights=fused_weights,
        prefix=prefix,
        forced_first=forced_first,
    )


def sample(
    model,
    context_ids,
    max_length: int | None = None,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    stop_at_end: bool = True,
    return_logits: bool = False,
    row_limits=None,
    fused_weights=None,
) -> DecodeResult:
    """Sampling with temperature, top-k and top-p (`SamplingSearch` as a function).

    `seed` is an int, or an int pair `(seed, stream)`; the same `seed` gives the
    same output. `row_limits` and `fused_weights` as for a `Search`'s call.
    """
    search = SamplingSearch(
        max_length=max_length,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        stop_at_end=stop_at_end,
        return_logits=return_logits,
    )
    return search(model, context_ids, row_limits=row_limits, fused_weights=fused_weights)
