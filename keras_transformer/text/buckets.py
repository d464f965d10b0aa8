"""Length buckets: which padded length a pair gets, and how many pairs share a batch.

Both input pipelines batch by these rules, so that a run from text files
(`data.make_batches`, tf.data) and a run from prepared data
(`prepared.PreparedBatches`, numpy) make batches of the same shapes from the
same pairs. Plain Python and numpy: the prepared-data loader runs without
TensorFlow.
"""

from __future__ import annotations

import numpy as np


def bucket_boundaries(max_tokens: int, smallest: int = 8) -> list[int]:
    """Padded lengths for the buckets: about 1.5x apart, multiples of 8, up to `max_tokens`."""
    lengths = []
    length = smallest
    while length < max_tokens:
        lengths.append(length)
        length = max(length + 8, int(length * 1.5) // 8 * 8)
    lengths.append(max_tokens)
    return lengths


def bucket_batch_sizes(
    max_tokens: int, batch_size: int = 64, batch_tokens: int | None = None
) -> list[int]:
    """Pairs a batch for each bucket of `bucket_boundaries(max_tokens)`: `batch_size`, or
    with a token budget `batch_tokens // L` for a bucket padded to length L (at least 1)."""
    lengths = bucket_boundaries(max_tokens)
    if batch_tokens is None:
        return [batch_size] * len(lengths)
    return [max(1, batch_tokens // length) for length in lengths]


def pair_lengths(source_lengths, target_lengths, max_tokens: int) -> np.ndarray:
    """The length that picks a pair's bucket: its longer side after the cut at `max_tokens`.

    `source_lengths` and `target_lengths` count a side's ids with [START] and
    [END]; the target feeds the model one token shorter (`target_in` and
    `target_out` are each one shorter), and keeps one more token than the
    source before that cut.
    """
    source = np.minimum(np.asarray(source_lengths), max_tokens)
    target = np.minimum(np.asarray(target_lengths), max_tokens + 1) - 1
    return np.maximum(source, target)


def fits(source_lengths, target_lengths, max_tokens: int) -> np.ndarray:
    """Which pairs are whole within `max_tokens` (the others are dropped by `overlong="drop"`)."""
    return (np.asarray(source_lengths) <= max_tokens) & (
        np.asarray(target_lengths) <= max_tokens + 1
    )


def bucket_of(lengths, max_tokens: int) -> np.ndarray:
    """The bucket index (into `bucket_boundaries(max_tokens)`) of pairs of these lengths
    (`pair_lengths`): the first bucket whose padded length holds them."""
    return np.searchsorted(bucket_boundaries(max_tokens), np.asarray(lengths), side="left")
