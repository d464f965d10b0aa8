"""Every tokenizer's last step: each row of ids between [START] and [END].

A plain function traced into each tokenizer's graph. It builds the rows from
the ragged ids' flat values and row splits: `tf.concat` of ragged tensors
gives the same rows with about 150 graph nodes of shape checks (conditionals
and their branch functions), and a tf.data pipeline that tokenizes as it
reads (the tutorial's) instantiates a tokenizer's graph again for every new
iterator.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.constants import END_ID, START_ID


def between_start_and_end(ids: tf.RaggedTensor) -> tf.RaggedTensor:
    """Ragged int64 ids `(batch, None)`, int64 row splits -> the same rows with START
    first and END last."""
    row_splits = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(ids.row_lengths() + 2)], axis=0)
    row_starts = row_splits[:-1]
    # Value j (counted over all rows) of row r lands after its own row's START and
    # after the START and END of each of the r rows before it. (`ids.value_rowids()`
    # would add 70 nodes of checks.)
    j = tf.range(tf.size(ids.flat_values, out_type=tf.int64))
    r = tf.searchsorted(ids.row_splits[1:], j, side="right", out_type=tf.int64)
    positions = j + 2 * r + 1
    values = tf.fill([row_splits[-1]], tf.constant(END_ID, tf.int64))
    values = tf.tensor_scatter_nd_update(
        values, row_starts[:, None], tf.fill(tf.shape(row_starts), tf.constant(START_ID, tf.int64))
    )
    values = tf.tensor_scatter_nd_update(values, positions[:, None], ids.flat_values)
    return tf.RaggedTensor.from_row_splits(values, row_splits, validate=False)
