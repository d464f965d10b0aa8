"""Mask builders shared by the attention layers.

Every mask here is boolean with True meaning "may attend". They use `keras.ops`,
so they work on eager tensors, inside `tf.function` and on symbolic Keras inputs
of a functional model alike.

The stacks build padding masks from token ids and pass them explicitly to
every attention call. A layer called without one (the tutorial's way:
`attention(embedded)`) falls back to the Keras mask its input carries, which
`PositionalEmbedding` sets and every block passes on (`resolve`); an explicit
mask always wins. The tutorial's own layers lose that mask under Keras 3
(wrapper layers drop it, `keras.layers.MultiHeadAttention` clears it:
docs/coming-from-the-tutorial.md); these layers keep it through every layer of a stack.
"""

from keras import ops

# Keras' own accessors: they know where each backend's tensors keep the mask.
from keras.src.backend.common.masking import get_keras_mask, set_keras_mask

from keras_transformer.constants import PAD_ID

# Added to the logits of masked keys. A finite value (not -inf) keeps a row
# whose keys are all masked finite (near-uniform weights) instead of NaN; the
# softmax runs in float32, where exp(-1e9 - max) is exactly 0.
_MASKED_LOGIT = -1e9


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

    Args:
        query_length: int or int scalar tensor. Number of query positions.
        key_length: int or int scalar tensor. Number of key positions.
        query_offset: int or int scalar tensor. Absolute position of the
            first query. Defaults to 0.

    Returns:
        bool tensor of shape `(query_length, key_length)`.
    """
    query_positions = ops.expand_dims(ops.arange(query_length) + query_offset, 1)
    key_positions = ops.expand_dims(ops.arange(key_length), 0)
    return ops.less_equal(key_positions, query_positions)


def key_mask(key_padding_mask):
    """Broadcastable attention mask `(batch, 1, keys)` from a key padding mask."""
    return ops.expand_dims(key_padding_mask, 1)


def additive_bias(mask):
    """A boolean "may attend" mask as a float32 bias for the logits: 0 where True,
    a large negative number where False."""
    return (1.0 - ops.cast(mask, "float32")) * _MASKED_LOGIT


def keras_mask(x):
    """The Keras mask `x` carries (`(batch, length)` bool, True at real tokens), or None.

    Keras keeps it as the tensor attribute `_keras_mask`, or, for tensors that
    take no attributes (JAX's arrays), in a table by the tensor's identity;
    numpy arrays and tensors without one give None.
    """
    return get_keras_mask(x)


def drop_keras_mask(x):
    """Removes the Keras mask from `x`, a tensor the caller made (in place)."""
    if keras_mask(x) is not None:
        set_keras_mask(x, None)


def resolve(explicit_mask, x):
    """`explicit_mask` if given, else the Keras mask `x` carries (None if neither)."""
    return explicit_mask if explicit_mask is not None else keras_mask(x)
