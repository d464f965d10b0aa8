"""The search interface, and the loop machinery every search shares.

A search is an object that holds its settings (`max_length`, `stop_at_end`,
`use_cache`, `fixed_shapes`, and its own: a beam's width, sampling's temperature)
and is called the same way whatever it is, as fairseq's SequenceGenerator and
KerasHub's samplers are:

    search = GreedySearch(max_length=32)
    result = search(model, context_ids, row_limits=None, fused_weights=None, stream=None,
                    prefix=None, forced_first=None)

`GreedySearch` and `SamplingSearch` live in `sampling.py`, `BeamSearch` in `beam.py`;
running one over a large batch a bounded number of rows at a time is `BatchDecoder`'s
(`batch_decoding.py`).

Every search runs as one `tf.while_loop`, batched, with each row stopping at its own
[END]. It sees the model only through its step interface: `decoding_start` (the
source encoded once, cross-attention keys/values projected once, empty
self-attention caches), `decoding_step` (the newest token in, the next token's
logits out, its keys/values appended to a cache that grows a position a step),
`reorder_decoding_state` (beam search) and `keep_decoding_rows` (greedy and beam
search over many rows drop the rows that ended). The state is an opaque nest.

Only TensorFlow ops are used (no XLA-only ops), so the searches can be exported in
a SavedModel that the stock TF Serving model server runs; with `fixed_shapes` no
loop value changes shape, so XLA can also compile them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer.constants import PAD_ID, START_ID

# Ids a search never emits, as transformers' generation never emits padding: [PAD]
# read back is padding to every mask (the uncached decoder would skip it, the cached
# one would not), and [START] only opens a target.
NEVER_EMITTED = (PAD_ID, START_ID)


def without_never_emitted(logits):
    """`logits` `(rows, vocab)` with the `NEVER_EMITTED` ids at -inf, for choosing a
    token; its score stays the model's log-probability (not renormalized without them)."""
    vocab_size = logits.shape[-1]
    if vocab_size is None:  # known only when run
        vocab = tf.range(tf.shape(logits)[-1])
        banned = tf.reduce_any(tf.equal(vocab[:, None], NEVER_EMITTED), axis=-1)
    else:  # a constant of the graph, built once when traced rather than at every step
        banned = tf.constant(np.isin(np.arange(vocab_size), NEVER_EMITTED))
    return tf.where(banned, tf.constant(-math.inf, logits.dtype), logits)


class DecodeResult(NamedTuple):
    """Output of a search.

    tokens: int64 `(batch, max_length)`, the generated ids after [START]; a row
        ends with [END] (unless it hit `max_length`) and is 0-padded after it.
    lengths: int32 `(batch,)`, generated tokens per row, [END] included.
    scores: float32 `(batch,)`, the sum of the log-probabilities of the
        generated tokens under the model (temperature 1, no filtering), a
        target prefix's tokens included; a forced first token counts 0, as do,
        in a beam search with transformers' length normalization, the [END]s
        forced at row limits (`Search`'s call).

    A beam search asked for `num_hypotheses` k adds a hypothesis axis after the
    rows: tokens `(batch, k, max_length)`, lengths and scores `(batch, k)`.
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
    check_max_length(max_length)
    return min(int(max_length), limit)


def check_max_length(max_length: int | None) -> None:
    """`max_length`: a positive integer, or None (the model's own limit)."""
    if max_length is not None and int(max_length) <= 0:
        raise ValueError(f"`max_length` must be a positive integer. Received: {max_length!r}")


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Search:
    """A search over the decoder's key/value cache: settings in, one call per batch.

    Subclasses (`GreedySearch`, `SamplingSearch`, `BeamSearch`) add their own
    settings and write `_search`; each checks its settings when it is built
    (ValueError naming the argument and the value). A search holds no model and no
    weights, so one object serves every model and every call; `replace` gives a
    copy with some settings changed (a translator's per-call beam width, its
    compiled searches' steps).

    Args:
        max_length: int. Most tokens to generate, capped by the model's
            `max_length`. Defaults to None: the model's.
        stop_at_end: bool. Stop a row at its [END]. False treats [END] as an
            ordinary token and decodes exactly `max_length` steps (benchmarks).
            Defaults to True.
        use_cache: bool. False re-runs the encoder and the whole decoder prefix
            at every step (the tutorial's way, for benchmarks); the result is
            the same. Defaults to True.
        fixed_shapes: bool. Keep every loop shape fixed (caches of `max_length`
            positions from the start), as a loop compiled by XLA needs; the
            result is the same. Defaults to False.
        matmul_attention: bool. Attend as batched matmuls from
            `MATMUL_ATTENTION_ROWS` rows on (`attention_form_by_rows`); False keeps
            broadcast products at every row count, which under concurrent requests
            on TensorFlow's oneDNN kernels take less memory and answer more
            (benchmarks/RESULTS.md, "Serving on oneDNN kernels"). The same results.
            Defaults to True.

    Call arguments:
        model: a built `Transformer`.
        context_ids: int `(batch, source_length)` source ids, 0-padded.
        row_limits: optional int `(batch,)`, the most tokens each row may
            generate ([END] included; see `batch_decoding.LengthPolicy`): a row that
            reaches its limit ends there with [END], with `stop_at_end` or without.
        fused_weights: the decoder's fused weights computed before
            (`Transformer.fused_step_weights`; a frozen translator's variables), or
            None to compute them from the model's variables.
        stream: optional int scalar, the sub-batch's number: a seeded sampling
            search draws from its own stream of the seed for each; the other
            searches ignore it.
        prefix: optional int `(batch, width)` target token ids, each row's
            0-padded (CTranslate2's `target_prefix`): a row's output starts with
            its prefix and continues from it, and its score is the
            log-probability of the whole output, prefix included. A prefix is
            cut at `max_length - 1` tokens, and a row's limit leaves room for it
            and its [END] (`prefix_forcing`). Rows of empty prefixes decode as
            without one.
        forced_first: optional int `(batch,)`, a token each row's output must
            start with, 0 for none (transformers' `forced_bos_token_id`, which
            multilingual checkpoints use for the target language's code). As
            transformers' logits processors force it, every other token is
            masked before the log-softmax at the first step: the forced token's
            log-probability is 0, and it counts in the row's length. With a
            `prefix`, a row's prefix follows its forced token (cut at
            `max_length - 2` tokens there), and its limit leaves room for both
            and an [END].

    Returns:
        A `DecodeResult`.
    """

    max_length: int | None = None
    stop_at_end: bool = True
    use_cache: bool = True
    fixed_shapes: bool = False
    matmul_attention: bool = True

    def __post_init__(self):
        check_max_length(self.max_length)

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
        context_ids = tf.convert_to_tensor(context_ids)
        steps = self.steps(model)
        forced = None
        if forced_first is not None:
            forced_first = tf.cast(tf.convert_to_tensor(forced_first), tf.int64)
            if row_limits is not None:
                # A forced row's limit leaves room for its token and an [END].
                row_limits = tf.maximum(row_limits, tf.where(forced_first > 0, 2, 1))
        if prefix is not None:
            forced, row_limits = prefix_forcing(prefix, steps, row_limits, forced_first)
        return self._search(
            model, context_ids, steps, row_limits, fused_weights, stream, forced, forced_first
        )

    def steps(self, model) -> int:
        """The width of this search's tokens for `model`: its steps at most."""
        return decode_length(model, self.max_length)

    def replace(self, **changes: Any) -> Search:
        """A copy with `changes` to its settings, checked as in the constructor."""
        return dataclasses.replace(self, **changes)

    def _search(
        self,
        model,
        context_ids,
        steps: int,
        row_limits,
        fused_weights,
        stream,
        forced,
        forced_first,
    ) -> DecodeResult:
        """The search; `forced` is None or `prefix_forcing`'s tokens, `forced_first`
        None or the call's, as int64."""
        raise NotImplementedError


def prefix_forcing(prefix, steps: int, row_limits=None, forced_first=None):
    """A target prefix as the token each step must take, and the row limits that fit it.

    Args:
        prefix: int `(batch, width)`, each row's prefix, 0-padded; cut at
            `steps - 1` tokens (a row ends with [END] within `steps`).
        steps: int. The search's steps.
        row_limits: optional int32 `(batch,)` (`Search`'s call).
        forced_first: optional int64 `(batch,)` (`Search`'s call): a row with a
            forced first token takes its prefix from the second step on (cut at
            `steps - 2` tokens).

    Returns:
        forced: int64 `(batch, steps)`, the token step i must take, -1 for none.
        row_limits: each row's limit raised to the steps its prefix takes + 1, or
            None if none was given.
    """
    prefix = tf.cast(tf.convert_to_tensor(prefix), tf.int64)
    if forced_first is not None:
        after_first = tf.pad(prefix, [[0, 0], [1, 0]])
        prefix = tf.where(forced_first[:, None] > 0, after_first, tf.pad(prefix, [[0, 0], [0, 1]]))
    prefix = prefix[:, : steps - 1]
    width = tf.shape(prefix)[1]
    # The steps a row's prefix takes (its forced first token's included); 0 without one.
    taken = tf.maximum(tf.reduce_max(tf.where(prefix > 0, tf.range(1, width + 1), 0), axis=1), 0)
    forced = tf.pad(
        tf.where(prefix > 0, prefix, -1), [[0, 0], [0, steps - width]], constant_values=-1
    )
    if row_limits is not None:
        # At most `steps`, as the prefix was cut to leave a step for [END].
        row_limits = tf.maximum(row_limits, taken + 1)
    return forced, row_limits


def first_token_forcing(forced_first, step):
    """Where a step takes its row's forced first token (`Search`'s `forced_first`,
    int64 `(rows,)`, 0 for none): bool `(rows,)`, all False after the first step."""
    return tf.logical_and(tf.equal(step, 0), forced_first > 0)


# Rows a search decodes at once from which a step's attention runs as batched matmuls
# (`layers.step_ops.attend`: faster than broadcast products at many rows, slower at one;
# benchmarks/RESULTS.md, "Figures behind design choices"). From as many rows greedy and
# beam search also drop the rows that ended from their loops (their `live_rows_loop`s).
MATMUL_ATTENTION_ROWS = 16


def attention_form_by_rows(rows, loop, cached_and_dynamic: bool, matmul_attention: bool = True):
    """`loop(many_rows, matmul_attention)`, its form chosen by the search's row count:
    `many_rows` from `MATMUL_ATTENTION_ROWS` rows, attending as batched matmuls there
    unless `matmul_attention` is False (`Search`'s setting).

    The choice is made once, before the step loop: both loops are in the graph and
    one runs. A `tf.cond` inside the step would cost every step its untaken branch.
    The uncached path and a loop for XLA (`cached_and_dynamic` False) run the
    broadcast form alone, as few rows.
    """
    if not cached_and_dynamic:
        return loop(False, False)
    return tf.cond(
        rows >= MATMUL_ATTENTION_ROWS,
        lambda: loop(True, matmul_attention),
        lambda: loop(False, False),
    )


def write_column(buffer, column, values):
    """`buffer` (batch, width) with `values` (batch,) added at `column` (which holds 0)."""
    one_hot = tf.one_hot(column, tf.shape(buffer)[-1], dtype=buffer.dtype)
    return buffer + values[..., None] * one_hot


def start_buffer(batch_shape, length: int):
    """int64 `batch_shape + (length + 1,)`: [START] then zeros."""
    start = tf.fill(tf.concat([batch_shape, [1]], 0), tf.constant(START_ID, tf.int64))
    rest = tf.zeros(tf.concat([batch_shape, [length]], 0), tf.int64)
    return tf.concat([start, rest], axis=-1)


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
