"""The tf.data input pipeline: string pairs in, batches out.

`make_batches` tokenizes `(source, target)` pairs (from `corpora`) and yields
`((context, target_in), target_out)`, int64, padded with 0, batched by length
buckets so that little compute goes to padding and the train step sees only a
handful of shapes; with subword regularization it samples a new segmentation
of every pair each epoch.

The corpus readers lived here before they moved to `corpora`; their names
stay importable from this module, so code written against it keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.text.buckets import bucket_batch_sizes, bucket_boundaries

# The readers' names as they were in this module (see the docstring).
from keras_transformer.text.corpora import (  # noqa: F401
    TFDS_TED,
    Pair,
    demo_corpus,
    load_corpus,
    load_tfds,
    read_parallel_files,
    read_tsv,
    split_lines,
    split_pairs,
    texts,
)
from keras_transformer.text.tokenizers.settings import check_subword_alpha

# ----------------------------------------------------------------------------- batching


def _as_string_dataset(pairs: Sequence[Pair] | tf.data.Dataset) -> tf.data.Dataset:
    if isinstance(pairs, tf.data.Dataset):
        return pairs
    pairs = list(pairs)
    if not pairs:
        raise ValueError("No sentence pairs to batch (the corpus is empty).")
    sources, targets = zip(*pairs, strict=True)
    return tf.data.Dataset.from_tensor_slices(
        (tf.constant(sources, tf.string), tf.constant(targets, tf.string))
    )


def tokenize_pairs(
    pairs: Sequence[Pair] | tf.data.Dataset, source_tokenizer, target_tokenizer
) -> tf.data.Dataset:
    """Pairs -> dataset of `(source_ids, target_ids)` 1-D int64 (with START/END)."""
    return (
        _as_string_dataset(pairs)
        .batch(1024)
        .map(
            lambda s, t: (source_tokenizer.tokenize(s), target_tokenizer.tokenize(t)),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .unbatch()
    )


def _sampled_pairs(
    pairs: tf.data.Dataset, source_tokenizer, target_tokenizer, alpha: float, max_tokens: int
) -> tf.data.Dataset:
    """As `tokenize_pairs`, with segmentations sampled at `alpha` on every pass.

    A side whose sample is longer than `max_tokens` (the target: one more, see
    `_model_inputs`) keeps its best segmentation instead, so that sampling
    never cuts or drops a pair that the best segmentation keeps whole.
    """

    def segment(tokenizer, strings, limit):
        best = tokenizer.tokenize(strings)
        sampled = tokenizer.tokenize_sampled(strings, alpha)
        rows = tf.range(tf.shape(strings, out_type=tf.int64)[0])
        fits = sampled.row_lengths() <= limit
        # Rows of [best; sampled]: the sample's where it fits, else the best.
        chosen = tf.where(fits, rows + tf.size(rows, out_type=tf.int64), rows)
        return tf.gather(tf.concat([best, sampled], axis=0), chosen)

    return (
        pairs.batch(1024)
        .map(
            lambda s, t: (
                segment(source_tokenizer, s, max_tokens),
                segment(target_tokenizer, t, max_tokens + 1),
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .unbatch()
    )


def _check_sampling(alpha: float, tokenizers) -> None:
    """Before any pass over the corpus: `alpha` and the tokenizers can sample."""
    check_subword_alpha(alpha)
    for tokenizer in tokenizers:
        if alpha and not hasattr(tokenizer, "tokenize_sampled"):
            raise ValueError(
                f"subword_alpha={alpha} samples segmentations, which a "
                f"{type(tokenizer).__name__} cannot: use SentencePiece tokenizers, or "
                "subword_alpha=0."
            )


def make_batches(
    pairs: Sequence[Pair] | tf.data.Dataset,
    source_tokenizer,
    target_tokenizer,
    batch_size: int = 64,
    max_tokens: int = 128,
    batch_tokens: int | None = None,
    shuffle: bool = True,
    shuffle_buffer: int = 20000,
    overlong: str = "truncate",
    seed: int | None = None,
    cache: bool = True,
    subword_alpha: float = 0.0,
) -> tf.data.Dataset:
    """Batches of `((context, target_in), target_out)`, int64, padded with 0.

    Each pair is tokenized (START/END added); `target_in` is the target
    without its last token, `target_out` without its first. Sequences over
    `max_tokens` are cut to `max_tokens` (`overlong="truncate"`, the
    tutorial's choice) or the pair is dropped (`overlong="drop"`).

    Pairs are grouped into buckets by length (`bucket_boundaries`), and each
    batch is padded to its bucket's length, so a batch holds sentences of
    similar length and the train step sees only a handful of shapes. The
    dataset's cardinality is its number of batches per epoch, counted in one
    pass over the tokenized pairs, so that Keras knows the steps of every epoch.

    Args:
        batch_size: pairs per batch, when `batch_tokens` is None.
        batch_tokens: token budget per batch instead: a bucket of padded
            length L gets `batch_tokens // L` pairs a batch.
        shuffle: reshuffle the pairs every epoch.
        cache: keep the tokenized pairs in memory (tokenize once); with
            `subword_alpha`, the text pairs.
        subword_alpha: when positive (at most 1), subword regularization:
            every epoch tokenizes the pairs again with segmentations sampled
            at this alpha (`SentencePieceTokenizer.tokenize_sampled`); a side
            whose sample exceeds `max_tokens` keeps its best segmentation.
            Samples differ in length from epoch to epoch, and so does the
            number of batches they fill: an epoch is as many batches as the
            best segmentations fill, from a fresh shuffle, the pairs repeating
            if the samples fill fewer. With `batch_tokens`, longer samples
            mean fewer pairs a batch, so an epoch then covers fewer pairs.
    """
    if overlong not in ("truncate", "drop"):
        raise ValueError(f"overlong must be 'truncate' or 'drop'. Received: {overlong!r}")
    if max_tokens < 2:
        raise ValueError(f"max_tokens must be at least 2. Received: max_tokens={max_tokens}")
    _check_sampling(subword_alpha, (source_tokenizer, target_tokenizer))
    pairs = _as_string_dataset(pairs)
    if subword_alpha and cache:
        pairs = pairs.cache()
    ds = _model_inputs(
        tokenize_pairs(pairs, source_tokenizer, target_tokenizer), max_tokens, overlong
    )
    if cache and not subword_alpha:
        ds = ds.cache()

    lengths = bucket_boundaries(max_tokens)
    sizes = bucket_batch_sizes(max_tokens, batch_size, batch_tokens)
    # A bucket holds lengths in [boundary[i-1], boundary[i]) and its batches are
    # padded to boundary[i] - 1 (context and target alike): boundaries are the
    # padded lengths plus one, and every pair fits the last one.
    boundaries = [length + 1 for length in lengths]
    batch_sizes = sizes + [sizes[-1]]
    # With `cache`, this pass also fills the cache that every epoch then reads.
    num_batches = _batches_per_epoch(ds, boundaries, batch_sizes)
    if subword_alpha:
        # Shuffled as text, then sampled: every pass segments every pair anew.
        if shuffle:
            pairs = pairs.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        sampled = _sampled_pairs(
            pairs.repeat(), source_tokenizer, target_tokenizer, subword_alpha, max_tokens
        )
        ds = _model_inputs(sampled, max_tokens, overlong)
    elif shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.bucket_by_sequence_length(
        element_length_func=_pair_length,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=batch_sizes,
        padded_shapes=(([None], [None]), [None]),
        pad_to_bucket_boundary=True,
    )
    if subword_alpha:
        ds = ds.take(num_batches)
    # Bucketing (and filtering) hides the number of batches from tf.data; without it
    # Keras shows "Unknown" steps in the first epoch and warns that the input ran out.
    ds = ds.apply(tf.data.experimental.assert_cardinality(num_batches))
    return ds.prefetch(tf.data.AUTOTUNE)


def _model_inputs(pairs: tf.data.Dataset, max_tokens: int, overlong: str) -> tf.data.Dataset:
    """Token pairs -> `((context, target_in), target_out)`, overlong ones cut or dropped."""
    if overlong == "drop":
        # target keeps one more token: target_in and target_out are each one shorter.
        pairs = pairs.filter(
            lambda s, t: tf.logical_and(tf.size(s) <= max_tokens, tf.size(t) <= max_tokens + 1)
        )
    return pairs.map(
        lambda s, t: ((s[:max_tokens], t[: max_tokens + 1][:-1]), t[: max_tokens + 1][1:]),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def _pair_length(inputs, target_out):
    """The length that picks a pair's bucket: its longer side."""
    return tf.maximum(tf.size(inputs[0]), tf.size(target_out))


def _batches_per_epoch(
    pairs: tf.data.Dataset, boundaries: list[int], batch_sizes: list[int]
) -> int:
    """How many batches `bucket_by_sequence_length` makes of `pairs`, in one pass.

    Whatever the shuffle order, each bucket receives the same pairs and yields
    ceil(pairs / batch size) batches, the last one partial.
    """
    counts = np.zeros(len(batch_sizes), np.int64)
    for chunk in pairs.map(_pair_length).batch(8192).as_numpy_iterator():
        # Bucket i holds boundaries[i - 1] <= length < boundaries[i].
        buckets = np.searchsorted(boundaries, chunk, side="right")
        counts += np.bincount(buckets, minlength=len(counts))
    return int(sum(-(-count // size) for count, size in zip(counts, batch_sizes, strict=True)))


def count_target_tokens(batches: tf.data.Dataset) -> int:
    """Real (non-padding) target tokens in one pass over `batches`."""
    total = 0
    for _, target_out in batches:
        total += int(tf.math.count_nonzero(target_out))
    return total
