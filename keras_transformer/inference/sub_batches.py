"""Sub-batches: the loop that runs a search over a large batch a bounded number of rows
at a time, and the padded shapes XLA compiles a search on.

`BatchDecoder` (`batch_decoding.py`) decides the bound (`sub_batch_size`), the searches
in flight and the shapes to compile; a search (`search.py`) knows nothing of
sub-batches beyond the `stream` number each call gives it. The loop itself,
`map_sub_batches`, takes any work done per row (teacher-forced scoring:
`scoring.py`).
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.inference.search import DecodeResult, Search


def in_sub_batches(
    model,
    search: Search | CompiledSearch,
    context_ids,
    sub_batch_size: int,
    in_flight: int = 1,
    balance_lengths: bool = False,
    row_limits=None,
    fused_weights=None,
    prefix=None,
    num_hypotheses=None,
    forced_first=None,
) -> DecodeResult:
    """Runs `search` over at most `sub_batch_size` rows at a time, in sub-batches.

    What bounds a serving call: however many rows a request holds, the graph
    decodes only `sub_batch_size` of them at once, so its memory is that of one
    sub-batch, and its ops stay small enough for other callers' ops to run
    between them on the shared thread pools (one batch of 10,000 rows makes
    every op long, and every other caller waits behind it); between
    sub-batches it hands its thread back to the calls queued before it
    (`yield_thread`).

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
        model: a built `Transformer`.
        search: a `Search` (or a `CompiledSearch`), called once a sub-batch with
            its source ids (int64 `(rows, length)`, 0-padded), its rows' limits
            and its number (int32 scalar) as `stream`, for seeding.
        context_ids: int64 `tf.RaggedTensor` `(batch, None)`, the source ids.
        sub_batch_size: int. Most rows decoded at once, over all searches in flight.
        in_flight: int. Searches run at once.
        balance_lengths: bool. With `in_flight` 2, split a batch of at most
            `sub_batch_size` rows by work, not by row count (see above).
        row_limits: optional int32 `(batch,)`, the most tokens each row may
            generate (`Search`'s call), in the rows' own order.
        fused_weights: passed to every search (`Search`'s call).
        prefix: optional int64 `tf.RaggedTensor` `(batch, None)`, each row's target
            prefix (`Search`'s call), in the rows' own order; a sub-batch's are
            0-padded to its longest.
        num_hypotheses: the size of the results' hypothesis axis when `search`
            returns one (`BeamSearch`'s `num_hypotheses`: int or int32 scalar),
            else None.
        forced_first: optional int `(batch,)`, each row's forced first token, 0
            for none (`Search`'s call), in the rows' own order.

    Returns:
        A `DecodeResult` of `batch` rows (without logits), with the hypothesis
        axis after the rows when `num_hypotheses` is given.
    """
    steps = search.steps(model)

    def decode(rows, index):
        # Padded to the longest row of this sub-batch only.
        chunk = tf.gather(context_ids, rows).to_tensor()
        limits = None if row_limits is None else tf.gather(row_limits, rows)
        extra = {} if prefix is None else {"prefix": tf.gather(prefix, rows).to_tensor()}
        if forced_first is not None:
            extra["forced_first"] = tf.gather(forced_first, rows)
        result = search(
            model, chunk, row_limits=limits, fused_weights=fused_weights, stream=index, **extra
        )
        # A hypothesis axis is folded into the rows: the arrays' elements keep
        # static shapes, which concatenating zero sub-batches needs.
        return (
            tf.reshape(result.tokens, [-1, steps]),
            tf.reshape(result.lengths, [-1]),
            tf.reshape(result.scores, [-1]),
        )

    outputs = map_sub_batches(
        decode,
        context_ids.row_lengths(),
        [(tf.int64, [None, steps]), (tf.int32, [None]), (tf.float32, [None])],
        sub_batch_size,
        in_flight,
        balance_lengths,
        per_row=num_hypotheses,
    )
    if num_hypotheses is not None:  # (rows * k, ...) -> (rows, k, ...)
        outputs = [
            tf.reshape(o, tf.concat([[-1, num_hypotheses], tf.shape(o)[1:]], 0)) for o in outputs
        ]
    return DecodeResult(*outputs)


def map_sub_batches(
    fn,
    lengths,
    specs,
    sub_batch_size: int,
    in_flight: int = 1,
    balance_lengths: bool = False,
    per_row=None,
) -> list:
    """Calls `fn` on a batch's rows a sub-batch at a time, rows of similar `lengths`
    together, and returns its outputs in the rows' own order: the loop of
    `in_sub_batches` (see there for the sort, the rows per call, `in_flight` and
    `balance_lengths`), for any work done per row.

    Args:
        fn: called as `fn(rows, index)` with `rows`, int32 `(n,)`, the positions in
            the batch of a sub-batch's rows (sorted by length), and `index`, the
            sub-batch's number (int32 scalar); returns a tuple of tensors of `n`
            rows each.
        lengths: int `(batch,)`, each row's length: the sort key.
        specs: one `(dtype, shape)` per output of `fn`, `shape` that of one
            sub-batch's output with its first dimension None; the others must be
            known (a batch of zero rows still has their width).
        sub_batch_size, in_flight, balance_lengths: as `in_sub_batches`'.
        per_row: None, or how many consecutive output rows `fn` gives each of its
            rows (int or int32 scalar: n-best hypotheses), kept together.

    Returns:
        A list of `fn`'s outputs, `batch` rows each, in the rows' order.
    """
    sub_batch_size, in_flight = int(sub_batch_size), int(in_flight)
    if sub_batch_size <= 0:
        raise ValueError(
            f"`sub_batch_size` must be positive. Received: sub_batch_size={sub_batch_size}"
        )
    if in_flight <= 0:
        raise ValueError(f"`in_flight` must be positive. Received: in_flight={in_flight}")
    order = tf.argsort(lengths, stable=True)
    rows = tf.shape(order)[0]
    # A batch smaller than the bound is split evenly over the calls in flight.
    size = tf.maximum(
        1, tf.minimum(rows_per_search(sub_batch_size, in_flight), -(-rows // in_flight))
    )
    count = (rows + size - 1) // size
    # Sub-batch k is sorted rows bounds[k]:bounds[k + 1].
    bounds = tf.minimum(tf.range(count + 1) * size, rows)
    # A batch known to hold fewer than 2 rows has nothing to split (and
    # `two_way_split` could not even be traced over it).
    if balance_lengths and in_flight == 2 and order.shape[0] not in (0, 1):
        uniform = bounds
        bounds = tf.cond(
            tf.logical_and(count == 2, rows <= sub_batch_size),
            lambda: two_way_split(tf.gather(lengths, order)),
            lambda: uniform,
        )

    def body(index, *arrays):
        # The first round starts with the call; each later sub-batch waits its turn.
        start = tf.cond(index < in_flight, lambda: index, lambda: yield_thread(index))
        outputs = fn(order[bounds[start] : bounds[start + 1]], start)
        return (index + 1, *(a.write(index, o) for a, o in zip(arrays, outputs, strict=True)))

    arrays = [
        tf.TensorArray(dtype, size=count, element_shape=tf.TensorShape(shape), infer_shape=False)
        for dtype, shape in specs
    ]
    # parallel_iterations bounds the sub-batches in flight (and so the memory):
    # they are independent, and the loop would otherwise run up to 10 at once. A
    # bound below `in_flight` rows runs as many one-row calls as it allows.
    _, *arrays = tf.while_loop(
        lambda index, *_: index < count,
        body,
        (tf.constant(0), *arrays),
        parallel_iterations=min(in_flight, sub_batch_size),
    )
    restore = tf.math.invert_permutation(order)
    if per_row is not None:
        restore = tf.reshape(restore[:, None] * per_row + tf.range(per_row)[None, :], [-1])
    return [tf.gather(a.concat(), restore) for a in arrays]


def yield_thread(value):
    """`value`, given back after the calls queued for the thread pool have had their turn.

    TensorFlow's executor runs a call's next ops on the thread that ran their
    inputs, and a pool thread serves its own queue (newest first) before the work
    queued from outside it; so a long call, once started, holds its inter-op
    thread to its end, and with as many long calls as threads (TensorFlow's
    default pool: about one a core) a new request waits for one of them to end.
    `DatasetToSingleElement` runs on a thread of its own and its completion
    queues the call's next ops from outside the pool, behind the requests that
    came first: between sub-batches a long call goes back to the end of the line.
    """
    return tf.data.Dataset.from_tensors(value).get_single_element()


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


class CompiledSearch:
    """`search` compiled by XLA on padded shapes, called as a `Search` is.

    Sources are padded to a multiple of `length_step` tokens (or to
    `max_source_length`), and rows to 1, 2,
    4 or a multiple of 8 within `most_rows`: a few shapes, and at most 7 rows of
    padding. Each source length gets its own compiled search, of the matching
    `steps` at most (XLA's caches have every slot from the start, so a search whose
    rows may generate only 31 tokens should attend over 31 slots, not 128); its
    tokens are padded back to `search`'s width. Padded rows hold padding only: their
    row limit is 1, so they end at once, and they are dropped. It takes no target
    prefix (the call's `prefix` raises ValueError); a forced first token it takes.

    Args:
        search: a `Search` built with `fixed_shapes=True`.
        length_step: int. Sources are padded to a multiple of it.
        max_source_length: int. The longest source.
        steps: ints, one per padded source length (`padded_source_lengths`): the
            most tokens any row of that length may generate.
        most_rows: int. The most rows a call gets (`rows_per_search`).
    """

    def __init__(
        self, search: Search, length_step: int, max_source_length: int, steps, most_rows: int
    ):
        self.length_step = int(length_step)
        self.source_lengths = padded_source_lengths(self.length_step, max_source_length)
        if len(steps) != len(self.source_lengths):
            raise ValueError(
                f"`steps` must have one entry per padded source length "
                f"({self.source_lengths}). Received: steps={steps}"
            )
        self.search = search
        self.bucket_steps = [int(n) for n in steps]
        self.most_rows = int(most_rows)

    def steps(self, model) -> int:
        """The width of the tokens: the compiled search's `steps`."""
        return self.search.steps(model)

    def __call__(
        self,
        model,
        context_ids,
        row_limits=None,
        fused_weights=None,
        stream=None,
        prefix=None,
        forced_first=None,
    ) -> DecodeResult:
        if prefix is not None:
            raise ValueError(
                "A search compiled by XLA takes no target prefix: run the search itself "
                "(a translator with `jit_compile` decodes prefixes without XLA)."
            )

        def compiled(steps):
            def run(context_ids, row_limits, stream, forced_first):
                search = self.search.replace(max_length=steps)
                return search(
                    model, context_ids, row_limits, fused_weights, stream, None, forced_first
                )

            return tf.function(run, jit_compile=True, autograph=False)

        searches = [compiled(n) for n in self.bucket_steps]
        width = self.steps(model)
        lengths = self.source_lengths
        sizes = sorted({n for n in (1, 2, 4, *range(8, self.most_rows, 8)) if n < self.most_rows})
        sizes = tf.constant([*sizes, self.most_rows])
        shape = tf.shape(context_ids)
        rows, length = shape[0], shape[1]
        padded_rows = tf.reduce_min(tf.boolean_mask(sizes, sizes >= rows))

        def branch(k):
            def decode():
                padded = tf.pad(context_ids, [[0, padded_rows - rows], [0, lengths[k] - length]])
                more_rows = [[0, padded_rows - rows]]
                limits = (
                    None if row_limits is None else tf.pad(row_limits, more_rows, constant_values=1)
                )
                # Padded rows force no first token.
                first = None if forced_first is None else tf.pad(forced_first, more_rows)
                result = searches[k](padded, limits, stream, first)
                tokens = result.tokens[:rows]
                # The step axis is the last, after the hypothesis axis of an n-best search.
                padding = [[0, 0]] * (tokens.shape.rank - 1) + [[0, width - self.bucket_steps[k]]]
                return tf.pad(tokens, padding), result.lengths[:rows], result.scores[:rows]

            return decode

        bucket = tf.minimum((length - 1) // self.length_step, len(lengths) - 1)
        tokens, lengths_out, scores = tf.switch_case(
            bucket, [branch(k) for k in range(len(lengths))]
        )
        return DecodeResult(tokens, lengths_out, scores)


def padded_source_lengths(length_step: int, max_source_length: int) -> list[int]:
    """The source lengths a `CompiledSearch` pads to: multiples of `length_step`, then
    `max_source_length`."""
    return [*range(length_step, max_source_length, length_step), max_source_length]
