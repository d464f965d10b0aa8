"""Mask builders shared by the attention layers.

Every mask here is boolean with True meaning "may attend". They use `keras.ops`,
so they work on eager tensors, inside `tf.function` and on symbolic Keras inputs
of a functional model alike. Masks are always built from token ids and passed
explicitly to attention; Keras' implicit `_keras_mask` propagation is never
relied on (under Keras 3 it is silently dropped by wrapper layers and cleared
by attention, see DESIGN.md).
"""

from keras import ops

from keras_transformer.constants import PAD_ID


def padding_mask(token_ids):
    """True where `token_ids` is a real token, False at padding (id 0).

    Args:
        token_ids: int tensor of shape `(batch, length)`.

    Returns:
        bool tensor of shape `(batch, length)`.
    """
    return ops.not_equal(token_ids, PAD_ID)


def causal_mask(query_length, key_length, query_offset=0):
    """Lower-triangular mask: query position i may see keys 0..i+query_offset.

    `query_offset` is the absolute position of the first query, used when the
    queries are the newest positions of a longer (cached) sequence.

    Returns:
        bool tensor of shape `(query_length, key_length)`.
    """
    query_positions = ops.expand_dims(ops.arange(query_length) + query_offset, 1)
    key_positions = ops.expand_dims(ops.arange(key_length), 0)
    return ops.less_equal(key_positions, query_positions)


def key_mask(key_padding_mask):
    """Broadcastable attention mask `(batch, 1, keys)` from a key padding mask."""
    return ops.expand_dims(key_padding_mask, 1)
