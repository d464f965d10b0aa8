"""In-graph search over the decoder's key/value cache: greedy and sampling, and the
loop machinery that beam search (`beam.py`) shares.

Every search runs as one `tf.while_loop`, batched, with each row stopping
at its own [END]; `in_sub_batches` runs a search over a large batch a bounded
number of rows at a time. The searches see the model only through its step interface:
`decoding_start` (the source encoded once, cross-attention keys/values
projected once, empty self-attention caches), `decoding_step` (the newest
token in, the next token's logits out, its keys/values appended to a cache
that grows a position a step), `reorder_decoding_state` (beam search) and
`keep_decoding_rows` (greedy and beam search over many rows drop the rows that ended).

Only TensorFlow ops are used (no XLA-only ops), so the searches can be
exported in a SavedModel that the stock TF Serving model server runs; with
`fixed_shapes` no loop value changes shape, so XLA can also compile them.

All results are `DecodeResult`s: generated ids after [START] (with the [END]
that closed a row, padded with 0 after it), the number of generated tokens
(the [END] counted), and the log-probability of those tokens under the model.

Greedy search and sampling are one loop (`_token_search`) that differ in how a
step chooses its token. What beam search uses from here is public:
`DecodeResult`, `decode_length`, the token buffers (`start_buffer`,
`write_column`), the loop invariants of the state (`state_invariant`,
`free_leading_dims`) and the choice of attention form by rows
(`attention_form_by_rows`). The dependency runs one way: this module does not
import beam search.

Why one module of ~560 lines: it is one concept, the token-by-token search loop.
Greedy search and sampling are the same `_token_search` (its two loops, one
stepping every row and one only the rows still decoding, share the buffers,
row limits and invariants), and `in_sub_batches` (with `rows_per_search`,
`two_way_split`) is the wrapper every search is called through. Beam search,
the one search with state of its own, already lives in `beam.py`; the next
piece to move, if this grows, is `in_sub_batches` and its split, which touch
no search's internals.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import tensorflow as tf

from keras_transformer.constants import END_ID, PAD_ID, START_ID


class DecodeResult(NamedTuple):
    """Output of a search.

    tokens: int64 `(batch, max_length)`, the generated ids after [START]; a row
        ends with [END] (unless it hit `max_length`) and is 0-padded after it.
    lengths: int32 `(batch,)`, generated tokens per row, [END] included.
    scores: float32 `(batch,)`, the sum of the log-probabilities of the
        generated tokens under the model (temperature 1, no filtering).
    logits: float32 `(batch, steps, vocab)` of the steps run, if asked
        (greedy and sampling only), else None.
    """

    tokens: tf.Tensor
    lengths: tf.Tensor
    scores: tf.Tensor
    logits: tf.Tensor | None = None


def decode_length(model, max_length: int | None) -> int:
    """The number of decoding steps: `max_length`, at most what the model's positions allow."""
    limit = int(model.max_length)
    if max_length is None:
        return limit
    if int(max_length) <= 0:
        raise ValueError(f"`max_length` must be a positive integer. Received: {max_length!r}")
    return min(int(max_length), limit)


def in_sub_batches(
    search,
    context_ids,
    sub_batch_size: int,
    steps: int,
    in_flight: int = 1,
    balance_lengths: bool = False,
) -> DecodeResult:
    """Runs `search` over at most `sub_batch_size` rows at a time, in sub-batches.

    What bounds a serving call: however many rows a request holds, the graph
    decodes only `sub_batch_size` of them at once, so its memory is that of one
    sub-batch, and its ops stay small enough for other callers' ops to run
    between them on the shared thread pools (one batch of 10,000 rows makes
    every op long, and every other caller waits behind it).

    `in_flight` searches run at once, each over `rows_per_search` rows (or
    `rows / in_flight`, when fewer): a search's step is a chain of
    small ops that keeps one core busy, so two searches side by side use a
    second core that one search leaves idle, within the same memory bound.

    Rows are sorted by source length first, as CTranslate2 does: a sub-batch
    holds rows of similar length, so one long row pads only rows as long as it,
    and its short neighbours do not wait for its decoding. Results come back
    in the rows' own order.

    Sorted, equal shares of rows are unequal shares of work: the search over
    the shorter rows ends first, and its core idles while the longest rows
    decode. With `balance_lengths` and two searches in flight, a batch that
    fits in one round of them (at most `sub_batch_size` rows) is split by
    work instead of rows: more of the short rows, fewer of the long ones. The
    bound on rows decoded at once holds; what it gives up is a fixed most rows
    per search, which XLA's compiled shapes need. (Larger batches are already
    balanced by the loop: a new sub-batch starts as soon as one ends.)

    Args:
        search: `(context_ids, index) -> DecodeResult`: one search over
            `context_ids`, int64 `(rows, length)` 0-padded; `index` is the
            sub-batch's number (int32 scalar), for seeding.
        context_ids: int64 `tf.RaggedTensor` `(batch, None)`, the source ids.
        sub_batch_size: int. Most rows decoded at once, over all searches in flight.
        steps: int. The width of `search`'s tokens.
        in_flight: int. Searches run at once.
        balance_lengths: bool. With `in_flight` 2, split a batch of at most
            `sub_batch_size` rows by work, not by row count (see above).

    Returns:
        A `DecodeResult` of `batch` rows (without logits).
    """
    sub_batch_size, in_flight = int(sub_batch_size), int(in_flight)
    if sub_batch_size <= 0:
        raise ValueError(
            f"`sub_batch_size` must be positive. Received: sub_batch_size={sub_batch_size}"
        )
    if in_flight <= 0:
        raise ValueError(f"`in_flight` must be positive. Received: in_flight={in_flight}")
    order = tf.argsort(context_ids.row_lengths(), stable=True)
    sorted_ids = tf.gather(context_ids, order)
    rows = tf.shape(order)[0]
    # A batch smaller than the bound is split evenly over the searches in flight.
    size = tf.maximum(
        1, tf.minimum(rows_per_search(sub_batch_size, in_flight), -(-rows // in_flight))
    )
    count = (rows + size - 1) // size
    # Sub-batch k is sorted rows bounds[k]:bounds[k + 1].
    bounds = tf.minimum(tf.range(count + 1) * size, rows)
    if balance_lengths and in_flight == 2:
        uniform = bounds
        bounds = tf.cond(
            tf.logical_and(count == 2, rows <= sub_batch_size),
            lambda: two_way_split(sorted_ids.row_lengths()),
            lambda: uniform,
        )

    def body(index, tokens, lengths, scores):
        # Padded to the longest row of this sub-batch only.
        chunk = sorted_ids[bounds[index] : bounds[index + 1]].to_tensor()
        result = search(chunk, index)
        return (
            index + 1,
            tokens.write(index, result.tokens),
            lengths.write(index, result.lengths),
            scores.write(index, result.scores),
        )

    def array(dtype, shape):
        return tf.TensorArray(dtype, size=count, element_shape=shape, infer_shape=False)

    # parallel_iterations bounds the sub-batches in flight (and so the memory):
    # they are independent, and the loop would otherwise run up to 10 at once. A
    # bound below `in_flight` rows runs as many one-row searches as it allows.
    _, tokens, lengths, scores = tf.while_loop(
        lambda index, *_: index < count,
        body,
        (
            tf.constant(0),
            array(tf.int64, tf.TensorShape([None, steps])),
            array(tf.int32, tf.TensorShape([None])),
            array(tf.float32, tf.TensorShape([None])),
        ),
        parallel_iterations=min(in_flight, sub_batch_size),
    )
    restore = tf.math.invert_permutation(order)
    return DecodeResult(
        tf.gather(tokens.concat(), restore),
        tf.gather(lengths.concat(), restore),
        tf.gather(scores.concat(), restore),
    )


def two_way_split(sorted_lengths):
    """Bounds `[0, k, rows]` splitting rows of ascending `sorted_lengths` into two
    searches of about equal work (2 <= rows).

    A search runs its rows for as many steps as its longest row needs, so its
    work is about rows x longest length; `k` makes the larger of the two the
    least it can be.
    """
    lengths = tf.cast(sorted_lengths, tf.float32)
    rows = tf.shape(lengths, out_type=tf.int32)[0]
    first = tf.range(1, rows)  # rows in the first search
    work = tf.maximum(
        lengths[:-1] * tf.cast(first, tf.float32),
        lengths[-1] * tf.cast(rows - first, tf.float32),
    )
    k = tf.cast(tf.argmin(work), tf.int32) + 1
    return tf.stack([0, k, rows])


def rows_per_search(sub_batch_size: int, in_flight: int) -> int:
    """Most rows one of `in_flight` searches decodes, within `sub_batch_size` rows in all."""
    return max(1, int(sub_batch_size) // int(in_flight))


# Rows a search decodes at once from which a step's attention runs as batched matmuls
# (`decoder_step._attend`): at 64 rows 1.1-1.2x faster on Eigen's kernels, at one row
# 0.7x under oneDNN's (benchmarks/RESULTS.md). From as many rows greedy and beam search
# also drop the rows that ended from their loops (their `live_rows_loop`s).
MATMUL_ATTENTION_ROWS = 16


def attention_form_by_rows(rows, loop, cached_and_dynamic: bool):
    """`loop(matmul_attention)`, its attention form chosen by the search's row count.

    The choice is made once, before the step loop: both loops are in the graph and
    one runs. A `tf.cond` inside the step would cost every step its untaken branch.
    The uncached path and a loop for XLA (`cached_and_dynamic` False) run the
    broadcast form alone.
    """
    if not cached_and_dynamic:
        return loop(False)
    return tf.cond(rows >= MATMUL_ATTENTION_ROWS, lambda: loop(True), lambda: loop(False))


def source_relative_limits(source_lengths, a: float, b: float, max_length: int):
    """Most tokens each row may generate: `a * source_length + b`, within [1, max_length].

    fairseq's `max_len_a` / `max_len_b`, except that the limit counts the row's [END]
    (fairseq's does not): one row that never emits [END] costs its own few steps
    instead of holding the whole batch to `max_length`.

    Args:
        source_lengths: int `(batch,)`, the real source tokens of each row.
        a, b: finite floats (`check_length_cap`).
    """
    limits = tf.math.floor(a * tf.cast(source_lengths, tf.float32) + b)
    # Clamped before the cast: a float beyond int32's range casts to its minimum.
    return tf.cast(tf.clip_by_value(limits, 1.0, float(max_length)), tf.int32)


def check_length_cap(a: float | None, b: float) -> None:
    """`a` and `b` of `source_relative_limits`: finite, `a` >= 0 (or None: no cap)."""
    if a is not None and not (math.isfinite(a) and a >= 0):
        raise ValueError(f"`max_length_a` must be a finite number >= 0 or None. Received: {a}")
    if not math.isfinite(b):
        raise ValueError(f"`max_length_b` must be a finite number. Received: {b}")


def write_column(buffer, column, values):
    """`buffer` (batch, width) with `values` (batch,) added at `column` (which holds 0)."""
    one_hot = tf.one_hot(column, tf.shape(buffer)[-1], dtype=buffer.dtype)
    return buffer + values[..., None] * one_hot


def start_buffer(batch_shape, length: int):
    """int64 `batch_shape + (length + 1,)`: [START] then zeros."""
    start = tf.fill(tf.concat([batch_shape, [1]], 0), tf.constant(START_ID, tf.int64))
    rest = tf.zeros(tf.concat([batch_shape, [length]], 0), tf.int64)
    return tf.concat([start, rest], axis=-1)


def _token_search(
    model,
    context_ids,
    max_length,
    choose,
    stop_at_end: bool,
    use_cache: bool,
    return_logits: bool,
    row_limits=None,
    fixed_shapes: bool = False,
    drop_ended_rows: bool = False,
    fused_weights=None,
) -> DecodeResult:
    """One token per row per step, chosen by `choose(logits, step) -> int64 ids`.

    A row whose `row_limits` entry is reached gets [END] as its last token.
    With `drop_ended_rows`, a search of many rows (the matmul form's) steps only the
    rows still decoding: `choose` must pick each row's token from its logits alone
    (greedy), as rows change places when others leave.
    """
    context_ids = tf.convert_to_tensor(context_ids)
    steps = decode_length(model, max_length)
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
            ids = choose(logits, i)
            if row_limits is not None:
                ids = tf.where(i + 1 >= row_limits, tf.constant(END_ID, tf.int64), ids)
            ids = tf.where(done, tf.constant(PAD_ID, tf.int64), ids)
            token_log_prob = tf.gather(log_probs, ids, batch_dims=1)
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
            ids = choose(logits, i)
            if row_limits is not None:
                ids = tf.where(
                    i + 1 >= tf.gather(row_limits, live), tf.constant(END_ID, tf.int64), ids
                )
            token_log_prob = tf.gather(tf.nn.log_softmax(logits, axis=-1), ids, batch_dims=1)

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

    def loop_by_form(matmul_attention):
        if drop_ended_rows and matmul_attention and stop_at_end and not return_logits:
            return live_rows_loop(matmul_attention)
        return loop(matmul_attention)

    tokens, lengths, scores, *logits = attention_form_by_rows(
        batch, loop_by_form, use_cache and not fixed_shapes
    )
    return DecodeResult(tokens[:, 1:], lengths, scores, logits[0] if logits else None)


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
) -> DecodeResult:
    """Greedy decoding: the most likely token at every step.

    Args:
        model: a built `Transformer`.
        context_ids: int `(batch, source_length)` source ids, 0-padded.
        max_length: most tokens to generate (capped by the model's max_length).
        stop_at_end: stop a row at its [END]. False decodes exactly
            `max_length` steps (benchmarks).
        use_cache: False re-runs the encoder and the whole decoder prefix at
            every step (the tutorial's way); the result is the same.
        return_logits: also return each step's logits.
        row_limits: optional int `(batch,)`, the most tokens each row may
            generate ([END] included; see `source_relative_limits`): a row that
            reaches its limit ends there with [END].
        fixed_shapes: keep every loop shape fixed (caches of `max_length`
            positions from the start), as a loop compiled by XLA needs; same
            result.
        fused_weights: the decoder's fused weights computed before
            (`decoder_step.fused_weights`; a frozen translator's variables), or
            None to compute them from the model's variables.
    """
    return _token_search(
        model,
        context_ids,
        max_length,
        lambda logits, step: tf.argmax(logits, axis=-1, output_type=tf.int64),
        stop_at_end,
        use_cache,
        return_logits,
        row_limits,
        fixed_shapes,
        drop_ended_rows=True,
        fused_weights=fused_weights,
    )


def filter_logits(logits, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0):
    """Logits for sampling: divided by `temperature`, then the top-k / top-p (nucleus) cut.

    Tokens outside the top `top_k` logits, or outside the smallest set whose
    probability reaches `top_p`, get -inf. `top_k=0` and `top_p=1` keep all.
    """
    if temperature <= 0:
        raise ValueError(f"`temperature` must be positive. Received: temperature={temperature}")
    if top_k < 0:
        raise ValueError(f"`top_k` must be >= 0. Received: top_k={top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"`top_p` must be in (0, 1]. Received: top_p={top_p}")
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
    """Sampling with temperature, top-k and top-p; the same `seed` gives the same output.

    `seed` is an int, or an int pair `(seed, stream)` (a translator gives each
    sub-batch its stream); every step draws with the pair folded with the
    step, so no two (seed, stream) pairs share their draws. Scores are
    log-probabilities under the unfiltered model distribution; `row_limits`
    and `fused_weights` as for `greedy_search`.
    """
    filter_logits(tf.zeros([1, 2]), temperature, top_k, top_p)  # checks the arguments now
    if seed is None:
        seed = tf.random.uniform([], maxval=2**31 - 1, dtype=tf.int64)
    key = tf.cast(seed, tf.int64)
    if key.shape.rank == 0:
        key = tf.stack([key, tf.constant(0, tf.int64)])

    def choose(logits, step):
        filtered = filter_logits(logits, temperature, top_k, top_p)
        step_seed = tf.random.experimental.stateless_fold_in(key, tf.cast(step, tf.int64))
        drawn = tf.random.stateless_categorical(filtered, 1, seed=step_seed, dtype=tf.int64)
        return drawn[:, 0]

    return _token_search(
        model,
        context_ids,
        max_length,
        choose,
        stop_at_end,
        True,
        return_logits,
        row_limits,
        fused_weights=fused_weights,
    )


def free_leading_dims(tensor, count: int) -> tf.TensorShape:
    """`tensor`'s shape with its first `count` axes unknown: the loop invariant of a
    buffer whose row count (and beam width) is not fixed."""
    shape = tensor.shape
    if shape.rank is None or shape.rank < count:
        return shape
    return tf.TensorShape([None] * count + shape.as_list()[count:])


def state_invariant(tensor) -> tf.TensorShape:
    """A decoding state tensor's loop invariant: its rank only.

    The self-attention caches grow by a position every step (a step attends over
    what was decoded, not over `max_length` slots) unless `fixed_shapes`, and the
    hypothesis axis is dynamic when `beam_width` is a tensor.
    """
    shape = tensor.shape
    return shape if shape.rank is None else tf.TensorShape([None] * shape.rank)
