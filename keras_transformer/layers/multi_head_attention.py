"""Multi-head scaled dot-product attention: the core the attention sublayers share.

Projections, the split into heads, the one-token step of decoding (its fused
projections and key/value cache, on TensorFlow: `step_ops.py`), query chunks
(`query_chunks.py`) and packed inputs (`packing.py`) live here; the residual
connection and layer norm around it live in `residual.py`, and the tutorial's
`GlobalSelfAttention`, `CausalSelfAttention` and `CrossAttention` (`attention.py`)
compose the two.

Masks are boolean with True meaning "may attend", `(batch, queries, keys)` or
broadcastable to it; the sublayers pass them explicitly.
"""

import math

import keras
from keras import ops

from keras_transformer.layers import backend, masks, packing, validation
from keras_transformer.layers.dropout import make_dropout

if backend.QUERY_CHUNKS:
    from keras_transformer.layers import query_chunks
if backend.ON_TENSORFLOW:  # the one-token step of decoding for serving
    import tensorflow as tf

    from keras_transformer.layers import step_ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention of queries over keys/values, without residual or norm.

    Args:
        num_heads: int. Number of attention heads.
        key_dim: int. Size of each head's queries, keys and values.
        output_dim: int. Feature size of the inputs and of the output.
        attention_dropout: float. Dropout on the attention weights. Defaults to 0.0.
        hashed_dropout: bool. Dropout masks from `HashedDropout`. Defaults to False.
        chunk_queries: bool. On TensorFlow's CPU kernels (no GPU, no XLA), long
            queries attend in chunks small enough for the batched matmul to use
            every thread (`query_chunks.py`); same results, longer tracing.
            Other backends attend whole. Defaults to False.
        **kwargs: base layer arguments.

    Call arguments:
        query: `(batch, queries, output_dim)`, or packed `(tokens, output_dim)`
            with `query_mask` (see `packing.py`); the output has the same form.
        context: keys/values input `(batch, keys, output_dim)` (or packed, with
            `context_mask`). Defaults to `query` (self-attention).
        attention_mask: optional bool, True where a query may attend a key.
            Without it, padded keys are masked by the keys' padding mask
            (`context_mask`, or `query_mask` for self-attention; else the
            Keras mask of the keys' input).
        query_mask, context_mask: bool `(batch, length)` padding masks, True
            at real tokens; required to lay out packed inputs.
        training: bool. Enables dropout.

    Returns:
        `(output, weights)`: output like `query`, weights `(batch, heads,
        queries, keys)` in float32.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        output_dim,
        attention_dropout=0.0,
        hashed_dropout=False,
        chunk_queries=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = validation.positive_int("num_heads", num_heads)
        self.key_dim = validation.positive_int("key_dim", key_dim)
        self.output_dim = validation.positive_int("output_dim", output_dim)
        self.attention_dropout = attention_dropout
        self.hashed_dropout = hashed_dropout
        self.chunk_queries = chunk_queries
        self.supports_masking = True
        heads_width = self.num_heads * self.key_dim

        def dense(units, name):
            return keras.layers.Dense(units, dtype=self.dtype_policy, name=name)

        self.query_dense = dense(heads_width, "query")
        self.key_dense = dense(heads_width, "key")
        self.value_dense = dense(heads_width, "value")
        self.output_dense = dense(self.output_dim, "attention_output")
        self.weights_dropout = make_dropout(
            attention_dropout, hashed_dropout, self.dtype_policy, "attention_dropout"
        )

    def build(self, input_shape=None):
        for layer in (self.query_dense, self.key_dense, self.value_dense):
            layer.build((None, None, self.output_dim))
        self.output_dense.build((None, None, self.num_heads * self.key_dim))
        super().build(input_shape)

    # -- heads ----------------------------------------------------------------

    def split_heads(self, x, padding_mask=None):
        """`(batch, length, heads * key_dim)` -> `(batch, heads, length, key_dim)`.

        Packed rows `(tokens, heads * key_dim)` are first laid out as the
        padded batch that `padding_mask` describes.
        """
        if packing.is_packed(x):
            x = packing.unpack(x, padding_mask)
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, self.num_heads, self.key_dim))
        return ops.transpose(x, (0, 2, 1, 3))

    def merge_heads(self, x):
        """`(batch, heads, length, key_dim)` -> `(batch, length, heads * key_dim)`."""
        batch, length = ops.shape(x)[0], ops.shape(x)[2]
        x = ops.transpose(x, (0, 2, 1, 3))
        return ops.reshape(x, (batch, length, self.num_heads * self.key_dim))

    def project_key_value(self, x, padding_mask=None):
        """Keys and values of `x` in heads: two `(batch, heads, length, key_dim)`.

        Cross-attention computes them once per source during decoding.
        """
        return (
            self.split_heads(self.key_dense(x), padding_mask),
            self.split_heads(self.value_dense(x), padding_mask),
        )

    # -- attention ------------------------------------------------------------

    def attend(self, query_input, key, value, attention_mask=None, training=None, query_mask=None):
        """Attention of `query_input`'s projected queries over `key` / `value` (in heads).

        The queries are projected here and the keys/values by the caller
        (`project_key_value`): queries are always new, while keys and values
        may come from a cache (decoding) or be computed once per source.

        Returns `(output, weights)` as the layer does.
        """
        query = self.split_heads(self.query_dense(query_input), query_mask)
        query = query * ops.cast(1.0 / math.sqrt(self.key_dim), query.dtype)
        # The mask as an additive bias: inside `attend_in_chunks`' branches a
        # boolean mask (kept for tf.where's gradient) trips TensorFlow's type
        # inference warnings, and an addition is no slower.
        bias = None
        if attention_mask is not None:
            bias = masks.additive_bias(attention_mask)

        def core(query, bias):
            scores = ops.matmul(query, ops.swapaxes(key, -1, -2))  # (b, h, q, k)
            # Softmax in float32 whatever the compute dtype: float16 overflows.
            scores = ops.cast(scores, "float32")
            if bias is not None:
                scores = scores + ops.expand_dims(bias, 1)
            # One key takes all the weight (Keras warns of a softmax over one value).
            one_key = scores.shape[-1] == 1
            weights = ops.ones_like(scores) if one_key else ops.softmax(scores, axis=-1)
            dropped = self.weights_dropout(ops.cast(weights, value.dtype), training=training)
            return ops.matmul(dropped, value), weights

        if self.chunk_queries and backend.QUERY_CHUNKS and query_chunks.worth_splitting():
            output, weights = query_chunks.attend_in_chunks(
                core, query, bias, ops.shape(key)[2], self.key_dim
            )
        else:
            output, weights = core(query, bias)
        output = self.merge_heads(output)
        if packing.is_packed(query_input):
            output = packing.pack(output, query_mask)
        return self.output_dense(output), weights

    # -- the one-token step of decoding (TensorFlow, `step_ops.py`) --------------

    def fused_query_key_value(self):
        """Query, key and value projections as one `step_ops.Projection`
        `(width, 3 * heads * key_dim)`, the query's part carrying the 1/sqrt(key_dim)
        scale: what a self-attention step multiplies by, fused once."""
        dtype = self.compute_dtype
        parts = (
            step_ops.projection(self.query_dense, dtype, 1.0 / math.sqrt(self.key_dim)),
            step_ops.projection(self.key_dense, dtype),
            step_ops.projection(self.value_dense, dtype),
        )
        return step_ops.Projection(*(tf.concat(list(w), axis=-1) for w in zip(*parts)))

    def scaled_query(self):
        """The query projection carrying the 1/sqrt(key_dim) scale (cross-attention's
        fused weights)."""
        return step_ops.projection(
            self.query_dense, self.compute_dtype, 1.0 / math.sqrt(self.key_dim)
        )

    def output_projection(self):
        return step_ops.projection(self.output_dense, self.compute_dtype)

    def step_key_value(self, context):
        """Keys `(rows, heads, keys, key_dim)` and values transposed to
        `(rows, heads, key_dim, keys)` of `context` (so that both of
        `step_ops.attend`'s sums run over the last axis)."""
        key, value = self.project_key_value(context)
        return key, tf.transpose(value, [0, 1, 3, 2])

    def empty_step_cache(self, rows, slots: int = 0):
        """A self-attention cache of `slots` positions (0: one that grows a position a
        step), laid out as `step_key_value`'s."""
        return (
            tf.zeros([rows, self.num_heads, slots, self.key_dim], self.compute_dtype),
            tf.zeros([rows, self.num_heads, self.key_dim, slots], self.compute_dtype),
        )

    def append_to_step_cache(self, cache, key, value, slots=None):
        """`cache` with a step's `key` and `value` `(rows, heads * key_dim)`: one
        position longer, or with `slots` (`step_ops.CacheSlots`) written in place."""
        key = step_ops.heads(key, self.num_heads, self.key_dim)
        value = tf.reshape(value, [-1, self.num_heads, self.key_dim, 1])
        key_cache, value_cache = cache
        if slots is None:
            return tf.concat([key_cache, key], axis=2), tf.concat([value_cache, value], axis=3)
        return tf.where(slots.write[:, None], key, key_cache), tf.where(
            slots.write, value, value_cache
        )

    def step_attend(self, query, key, value, bias=None, matmul=False):
        """A step's projected `query` `(rows, heads * key_dim)` over `key`/`value` in the
        step's layout: `(rows, heads * key_dim)` (see `step_ops.attend`)."""
        query = step_ops.heads(query, self.num_heads, self.key_dim)
        return step_ops.attend(query, key, value, self.num_heads * self.key_dim, bias, matmul)

    def call(
        self,
        query,
        context=None,
        attention_mask=None,
        query_mask=None,
        context_mask=None,
        training=None,
    ):
        if context is None:
            context, context_mask = query, query_mask
        context_mask = masks.resolve(context_mask, context)
        if attention_mask is None and context_mask is not None:
            attention_mask = masks.key_mask(context_mask)
        key, value = self.project_key_value(context, context_mask)
        return self.attend(query, key, value, attention_mask, training, query_mask)

    def compute_output_shape(self, query_shape, context_shape=None, *args, **kwargs):
        keys_shape = query_shape if context_shape is None else context_shape
        weights_shape = (query_shape[0], self.num_heads, query_shape[1], keys_shape[1])
        return query_shape, weights_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            output_dim=self.output_dim,
            attention_dropout=self.attention_dropout,
            hashed_dropout=self.hashed_dropout,
            chunk_queries=self.chunk_queries,
        )
        return config
