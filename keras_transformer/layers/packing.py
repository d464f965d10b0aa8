"""Packed tokens: the real (non-padding) tokens of a padded batch, as rows.

Every part of a Transformer block except the attention itself works on each
token alone (projections, feed-forward, dropout, residual sums, layer norms),
so padded positions cost as much there as real ones and give nothing back.
A packed tensor keeps only the real tokens: `(tokens, d_model)` instead of
`(batch, length, d_model)`, the rows in row-major order of the padding mask's
True entries. Attention puts its queries, keys and values back into the padded
layout (`unpack`), where heads and masks work as before, and packs its output.

Packing needs a data-dependent token count, so it is for graph and eager mode,
not for XLA-compiled functions (static shapes).
"""

import tensorflow as tf


def is_packed(x):
    """True for packed features `(tokens, d_model)`, False for `(batch, length, d_model)`."""
    return tf.TensorShape(x.shape).rank == 2


def real_rows(padding_mask):
    """Flat indices (into `batch * length`) of the real tokens: `(tokens,)` int32."""
    return tf.cast(tf.where(tf.reshape(padding_mask, [-1]))[:, 0], tf.int32)


def pack(x, padding_mask):
    """`(batch, length, features)` -> `(tokens, features)`: the real tokens' rows."""
    rows = tf.reshape(x, [-1, tf.shape(x)[-1]])
    return tf.gather(rows, real_rows(padding_mask))


def unpack(packed, padding_mask):
    """`(tokens, features)` -> `(batch, length, features)`, zeros at padding."""
    batch, length = tf.shape(padding_mask)[0], tf.shape(padding_mask)[1]
    features = tf.shape(packed)[-1]
    flat = tf.scatter_nd(real_rows(padding_mask)[:, None], packed, [batch * length, features])
    return tf.reshape(flat, [batch, length, features])
