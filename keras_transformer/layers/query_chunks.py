"""Attention in query chunks, for TensorFlow's batched matmul on CPU.

TensorFlow's CPU `BatchMatMul` spreads the products of a batch over its
threads only while one product costs at most 128 * 128 multiply-adds
(`kMaxCostOuterParallelism` in tensorflow/core/kernels/matmul_op_impl.h).
Above that it runs the products one after another, each too small to use
more than one thread. Attention products cost `queries * keys * head_size`,
so with the tutorial's 16-wide heads a self-attention crosses the line at 33
tokens, and the core's time jumps there.

Splitting the queries into chunks of `rows` keeps every product of the
forward and the backward pass (each costs `rows * keys * head_size`) under
the line. Each chunk's softmax is over all keys, so the concatenated result
is the unsplit one (figures: benchmarks/RESULTS.md, "Figures behind design choices").

GPUs and XLA have no such heuristic: there the queries are never split.

The price is tracing. With lengths known only at run time (`fit` on bucketed
batches) the chunk count is picked at run time from `CHUNK_COUNTS`, and each
attention layer's graph holds one branch per count, 31 copies of the core in
all, which makes the first `fit` step trace for minutes and take more memory.
Hence `chunk_queries` is off by default.
"""

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

# TensorFlow's threshold (see above).
MAX_PRODUCT_COST = 128 * 128

# The chunk counts on offer. With unknown lengths the count is picked at run
# time from these (one graph branch each); past the last one the products stay
# over the threshold, and the queries are left whole.
CHUNK_COUNTS = (1, 2, 4, 8, 16)


def worth_splitting():
    """Whether this trace runs TensorFlow's CPU kernels (no GPU, no XLA)."""
    if tf.config.list_logical_devices("GPU"):
        return False
    return not control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def chunk_count_index(query_length, key_length, head_size):
    """Index into `CHUNK_COUNTS` of the fewest chunks that keep products small.

    0 (no split) when the whole query fits, or when even the most chunks
    would leave each product over the threshold.
    """
    rows = tf.maximum(MAX_PRODUCT_COST // (key_length * head_size), 1)
    needed = (query_length + rows - 1) // rows
    index = tf.reduce_sum(tf.cast(tf.constant(CHUNK_COUNTS) < needed, tf.int32))
    return tf.where(index < len(CHUNK_COUNTS), index, 0)


def _even_sizes(length, count):
    """`count` chunk sizes summing to `length`, differing by at most one."""
    base, extra = length // count, length % count
    return base + tf.cast(tf.range(count) < extra, length.dtype)


def attend_in_chunks(attend, query, attention_mask, key_length, head_size):
    """Runs `attend` on query chunks and concatenates along the query axis.

    Args:
        attend: `(query, attention_mask) -> (output, weights)`, the attention
            core for `query` `(batch, heads, queries, head_size)`; `output`
            and `weights` have the queries on axis 2.
        query: `(batch, heads, queries, head_size)`.
        attention_mask: None, or a mask or bias `(batch or 1, queries or 1,
            keys)`; split along the queries unless that axis is statically 1.
        key_length: int scalar, the number of keys.
        head_size: int.

    Returns:
        `attend`'s `(output, weights)` for the whole query.
    """
    if query.shape[2] == 1:  # one decoding step: nothing to split
        return attend(query, attention_mask)
    query_length = tf.shape(query)[2]
    index = chunk_count_index(query_length, key_length, head_size)
    split_mask = attention_mask is not None and attention_mask.shape[1] != 1

    def run(count):
        def branch():
            if count == 1:
                return attend(query, attention_mask)
            sizes = _even_sizes(query_length, count)
            queries = tf.split(query, sizes, axis=2, num=count)
            if split_mask:
                chunk_masks = tf.split(attention_mask, sizes, axis=1, num=count)
            else:
                chunk_masks = [attention_mask] * count
            outputs, weights = zip(*(attend(q, m) for q, m in zip(queries, chunk_masks)))
            return tf.concat(outputs, axis=2), tf.concat(weights, axis=2)

        return branch

    static_index = tf.get_static_value(index)
    if static_index is not None:
        return run(CHUNK_COUNTS[int(static_index)])()
    return tf.switch_case(index, [run(count) for count in CHUNK_COUNTS])
