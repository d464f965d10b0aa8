"""Packed tokens: the real (non-padding) tokens of a padded batch, as rows.

Every part of a Transformer block except the attention itself works on each
token alone (projections, feed-forward, dropout, residual sums, layer norms),
so padded positions cost as much there as real ones and give nothing back.
A packed tensor keeps only the real tokens: `(tokens, d_model)` instead of
`(batch, length, d_model)`, the rows in row-major order of the padding mask's
True entries. Attention puts its queries, keys and values back into the padded
layout (`unpack`), where heads and masks work as before, and packs its output.

Packing needs a data-dependent token count, so it is for TensorFlow graphs and
eager calls on any backend, not for XLA-compiled functions or JAX's `jit`
(static shapes). Training packs on TensorFlow only (`backend.PACKED_TRAINING`).
"""

from keras import ops


def rank(x):
    """The number of axes of `x`, or None where a TensorFlow graph does not know it."""
    try:
        return len(x.shape)
    except ValueError:  # a tf.TensorShape of unknown rank has no length
        return None


def is_packed(x):
    """True for packed features `(tokens, d_model)`, False for `(batch, length, d_model)`."""
    return rank(x) == 2


def real_rows(padding_mask):
    """Flat indices (into `batch * length`) of the real tokens: `(tokens,)` int32."""
    return ops.cast(ops.where(ops.reshape(padding_mask, (-1,)))[0], "int32")


def pack(x, padding_mask):
    """`(batch, length, features)` -> `(tokens, features)`: the real tokens' rows."""
    rows = ops.reshape(x, (-1, ops.shape(x)[-1]))
    return ops.take(rows, real_rows(padding_mask), axis=0)


def unpack(packed, padding_mask):
    """`(tokens, features)` -> `(batch, length, features)`, zeros at padding."""
    batch, length = ops.shape(padding_mask)[0], ops.shape(padding_mask)[1]
    features = ops.shape(packed)[-1]
    indices = ops.expand_dims(real_rows(padding_mask), 1)
    flat = ops.scatter(indices, packed, (batch * length, features))
    return ops.reshape(flat, (batch, length, features))
