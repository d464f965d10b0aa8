"""Multi-head attention sublayers: attention + residual + layer normalization.

All masks are passed explicitly (see `masks.py`); the layers never read or
produce Keras' implicit `_keras_mask`.
"""

import math

import keras
import tensorflow as tf

from keras_transformer.layers import masks, packing, query_chunks, validation
from keras_transformer.layers.dropout import make_dropout
from keras_transformer.layers.layer_norm import LayerNormalization

# Added to the logits of masked keys. A finite value (not -inf) keeps a row
# whose keys are all masked finite (near-uniform weights) instead of NaN; the
# softmax runs in float32, where exp(-1e9 - max) is exactly 0.
_MASKED_LOGIT = -1e9


@keras.saving.register_keras_serializable(package="keras_transformer")
class BaseAttention(keras.layers.Layer):
    """Multi-head attention wrapped in a residual connection and layer norm.

    Post-LN (the paper, default): `y = LayerNorm(x + Dropout(Attention(x)))`.
    Pre-LN (`normalize_first=True`): `y = x + Dropout(Attention(LayerNorm(x)))`.

    Each of the `num_heads` heads works in `d_model // num_heads` dimensions,
    as in the paper. Subclasses choose the keys and values (the input itself,
    or an encoded context) and the mask.

    Masking: masks are boolean with True meaning "may attend", shaped
    `(batch, queries, keys)` or broadcastable to it. They are computed from
    token ids by the caller and passed explicitly; there is no implicit Keras
    mask propagation.

    Args:
        d_model: int. Size of the input and output features.
        num_heads: int. Number of attention heads; must divide `d_model`.
        dropout_rate: float. Dropout on the sublayer output before the
            residual sum. Defaults to 0.1.
        attention_dropout: float. Dropout on the attention weights.
            Defaults to 0.0.
        layer_norm_epsilon: float. Defaults to 1e-5.
        normalize_first: bool. Pre-LN instead of post-LN. Defaults to False.
        hashed_dropout: bool. Draw dropout masks with `HashedDropout`, much
            cheaper under XLA on CPU. Defaults to False (`keras.layers.Dropout`).
        chunk_queries: bool. On TensorFlow's CPU kernels (no GPU, no XLA),
            let long queries attend in chunks small enough for the batched
            matmul to use every thread (`query_chunks.py`); same results,
            longer tracing. Defaults to False.
        **kwargs: base layer arguments (`name`, `dtype`, ...).
    """

    def __init__(
        self,
        d_model,
        num_heads,
        dropout_rate=0.1,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-5,
        normalize_first=False,
        hashed_dropout=False,
        chunk_queries=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_heads(d_model, num_heads)
        validation.check_rate("dropout_rate", dropout_rate)
        validation.check_rate("attention_dropout", attention_dropout)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.hashed_dropout = hashed_dropout
        self.chunk_queries = chunk_queries
        self.head_size = d_model // num_heads

        def dense(name):
            return keras.layers.Dense(d_model, dtype=self.dtype_policy, name=name)

        self.query_dense = dense("query")
        self.key_dense = dense("key")
        self.value_dense = dense("value")
        self.output_dense = dense("attention_output")
        self.weights_dropout = make_dropout(
            attention_dropout, hashed_dropout, self.dtype_policy, "attention_dropout"
        )
        self.output_dropout = make_dropout(
            dropout_rate, hashed_dropout, self.dtype_policy, "output_dropout"
        )
        self.layernorm = LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layernorm"
        )

    def build(self, input_shape):
        features = (None, None, self.d_model)
        for layer in (self.query_dense, self.key_dense, self.value_dense, self.output_dense):
            layer.build(features)
        self.layernorm.build(features)
        super().build(input_shape)

    # -- pieces shared by the subclasses -------------------------------------

    def split_heads(self, x, padding_mask=None):
        """(batch, length, d_model) -> (batch, heads, length, head_size).

        Packed features `(tokens, d_model)` are first put back into the padded
        layout that `padding_mask` describes (see `packing.py`).
        """
        if packing.is_packed(x):
            x = packing.unpack(x, padding_mask)
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [batch, length, self.num_heads, self.head_size])
        return tf.transpose(x, [0, 2, 1, 3])

    def merge_heads(self, x):
        """(batch, heads, length, head_size) -> (batch, length, d_model)."""
        batch, length = tf.shape(x)[0], tf.shape(x)[2]
        x = tf.transpose(x, [0, 2, 1, 3])
        return tf.reshape(x, [batch, length, self.d_model])

    def project_key_value(self, x, padding_mask=None):
        """Keys and values of `x`, split into heads: two `(b, h, len, head_size)`.

        `x` may be packed; `padding_mask` then gives its padded layout.
        """
        return (
            self.split_heads(self.key_dense(x), padding_mask),
            self.split_heads(self.value_dense(x), padding_mask),
        )

    def attend(self, query_input, key, value, attention_mask=None, training=None, query_mask=None):
        """Scaled dot-product attention of `query_input` over projected keys/values.

        Packed queries `(tokens, d_model)` need `query_mask`, their padding
        mask: they are projected as rows, attend in the padded layout, and the
        output comes back packed the same way.

        With `chunk_queries`, on TensorFlow's CPU kernels long queries attend
        in chunks (see `query_chunks.py`); the result is the same.

        Returns:
            `(output, weights)`: output `(batch, queries, d_model)` (or
            `(tokens, d_model)`) before the residual, weights
            `(batch, heads, queries, keys)` in float32.
        """
        query = self.split_heads(self.query_dense(query_input), query_mask)
        query = query * tf.cast(1.0 / math.sqrt(self.head_size), query.dtype)
        # The mask as an additive bias: inside `attend_in_chunks`' branches a
        # boolean mask (kept for tf.where's gradient) trips TensorFlow's type
        # inference warnings, and an addition is no slower.
        bias = None
        if attention_mask is not None:
            bias = (1.0 - tf.cast(attention_mask, tf.float32)) * _MASKED_LOGIT

        def core(query, bias):
            scores = tf.matmul(query, key, transpose_b=True)  # (b, h, q, k)
            # Softmax in float32 whatever the compute dtype: float16 overflows.
            scores = tf.cast(scores, tf.float32)
            if bias is not None:
                scores = scores + bias[:, None, :, :]
            weights = tf.nn.softmax(scores, axis=-1)
            dropped = self.weights_dropout(tf.cast(weights, value.dtype), training=training)
            return tf.matmul(dropped, value), weights

        if self.chunk_queries and query_chunks.worth_splitting():
            output, weights = query_chunks.attend_in_chunks(
                core, query, bias, tf.shape(key)[2], self.head_size
            )
        else:
            output, weights = core(query, bias)
        output = self.merge_heads(output)
        if packing.is_packed(query_input):
            output = packing.pack(output, query_mask)
        return self.output_dense(output), weights

    def normalize_input(self, x):
        return self.layernorm(x) if self.normalize_first else x

    def add_residual(self, x, sublayer_output, training=None):
        y = x + self.output_dropout(sublayer_output, training=training)
        return y if self.normalize_first else self.layernorm(y)

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            num_heads=self.num_heads,
            dropout_rate=self.dropout_rate,
            attention_dropout=self.attention_dropout,
            layer_norm_epsilon=self.layer_norm_epsilon,
            normalize_first=self.normalize_first,
            hashed_dropout=self.hashed_dropout,
            chunk_queries=self.chunk_queries,
        )
        return config

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape


@keras.saving.register_keras_serializable(package="keras_transformer")
class GlobalSelfAttention(BaseAttention):
    """Self-attention where every position sees every real position (encoder).

    Call arguments:
        x: tensor `(batch, length, d_model)`, or packed `(tokens, d_model)`:
            the real tokens only (see `packing.py`); the output has the
            same form.
        padding_mask: optional bool `(batch, length)`, True at real tokens;
            padded keys are never attended to. Required with packed `x`.
        training: bool. Enables dropout.
        return_attention_scores: bool. Also return the attention weights
            `(batch, heads, length, length)`.

    Example:
    >>> layer = GlobalSelfAttention(d_model=8, num_heads=2)
    >>> layer(np.zeros((2, 5, 8)), padding_mask=np.ones((2, 5), bool)).shape
    TensorShape([2, 5, 8])
    """

    def call(self, x, padding_mask=None, training=None, return_attention_scores=False):
        validation.check_maybe_packed("x", x, self.d_model, padding_mask)
        mask = None if padding_mask is None else masks.key_mask(padding_mask)
        h = self.normalize_input(x)
        key, value = self.project_key_value(h, padding_mask)
        output, weights = self.attend(h, key, value, mask, training, query_mask=padding_mask)
        y = self.add_residual(x, output, training)
        return (y, weights) if return_attention_scores else y


@keras.saving.register_keras_serializable(package="keras_transformer")
class CausalSelfAttention(BaseAttention):
    """Self-attention where position t sees only positions <= t (decoder).

    With a key/value cache it processes just the newest positions: their keys
    and values are written into the cache at `cache_index`, and the queries
    attend over the cache, so each decoding step costs one position instead of
    a re-run of the whole prefix.

    Call arguments:
        x: tensor `(batch, length, d_model)`, or packed `(tokens, d_model)`
            (see `packing.py`; not with a cache); the output has the same form.
        padding_mask: optional bool `(batch, length)`, True at real tokens.
            Required with packed `x`; ignored with a cache (generated
            prefixes hold no padding).
        cache: optional `(key_cache, value_cache)`, each
            `(batch, heads, max_length, head_size)`, from `empty_cache`.
        cache_index: int scalar. Absolute position of `x[:, 0]`; required
            with `cache`.
        training: bool. Enables dropout.
        return_attention_scores: bool. Also return the attention weights.

    Returns:
        `y`, then the updated cache if one was given, then the weights if asked.
    """

    def empty_cache(self, batch_size, max_length, dtype=None):
        """A zero key/value cache for `max_length` positions."""
        dtype = dtype or self.compute_dtype
        shape = [batch_size, self.num_heads, max_length, self.head_size]
        return (tf.zeros(shape, dtype), tf.zeros(shape, dtype))

    def call(
        self,
        x,
        padding_mask=None,
        cache=None,
        cache_index=None,
        training=None,
        return_attention_scores=False,
    ):
        validation.check_maybe_packed("x", x, self.d_model, padding_mask)
        if cache is not None and packing.is_packed(x):
            raise ValueError(
                "With a key/value cache `x` must be (batch, length, d_model), not packed. "
                f"Received shape {x.shape}"
            )
        h = self.normalize_input(x)
        key, value = self.project_key_value(h, padding_mask)
        length = tf.shape(key)[2]
        if cache is None:
            mask = masks.causal_mask(length, length)[None, :, :]
            if padding_mask is not None:
                mask = tf.logical_and(mask, masks.key_mask(padding_mask))
        else:
            if cache_index is None:
                raise ValueError("`cache_index` is required when `cache` is given.")
            key_cache, value_cache = cache
            key_cache = _update_slice(key_cache, key, cache_index)
            value_cache = _update_slice(value_cache, value, cache_index)
            key, value = key_cache, value_cache
            cache = (key_cache, value_cache)
            mask = masks.causal_mask(length, tf.shape(key)[2], cache_index)[None, :, :]
        output, weights = self.attend(h, key, value, mask, training, query_mask=padding_mask)
        y = self.add_residual(x, output, training)
        results = (y,)
        if cache is not None:
            results += (cache,)
        if return_attention_scores:
            results += (weights,)
        return results[0] if len(results) == 1 else results


def _update_slice(cache, update, index):
    """Writes `update` (b, h, t, d) into `cache` (b, h, max_len, d) at position `index`."""
    length = tf.shape(update)[2]
    positions = tf.range(length) + index
    # Scatter along the position axis: move it to the front and back again.
    cache_t = tf.transpose(cache, [2, 0, 1, 3])
    update_t = tf.transpose(tf.cast(update, cache.dtype), [2, 0, 1, 3])
    cache_t = tf.tensor_scatter_nd_update(cache_t, positions[:, None], update_t)
    return tf.transpose(cache_t, [1, 2, 0, 3])


@keras.saving.register_keras_serializable(package="keras_transformer")
class CrossAttention(BaseAttention):
    """Attention of decoder positions over the encoded source (the context).

    Call arguments:
        x: tensor `(batch, target_length, d_model)`, the queries, or packed
            `(tokens, d_model)` (see `packing.py`); the output has the same form.
        context: tensor `(batch, source_length, d_model)`, the encoder output,
            or packed `(source_tokens, d_model)`.
        context_mask: optional bool `(batch, source_length)`, True at real
            source tokens; padded source positions are never attended to.
            Required with a packed `context`.
        context_key_value: optional `(key, value)` from `project_key_value`,
            computed once per source during decoding; `context` is then unused.
        padding_mask: optional bool `(batch, target_length)`, True at real
            target tokens: the layout of packed `x` (unused otherwise).
        training: bool. Enables dropout.
        return_attention_scores: bool. Also return the attention weights
            `(batch, heads, target_length, source_length)`, e.g. for plotting.
    """

    def call(
        self,
        x,
        context=None,
        context_mask=None,
        context_key_value=None,
        padding_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        validation.check_maybe_packed("x", x, self.d_model, padding_mask)
        if context_key_value is None:
            if context is None:
                raise ValueError("CrossAttention needs `context` or `context_key_value`.")
            validation.check_maybe_packed(
                "context", context, self.d_model, context_mask, "context_mask"
            )
            context_key_value = self.project_key_value(context, context_mask)
        key, value = context_key_value
        mask = None if context_mask is None else masks.key_mask(context_mask)
        h = self.normalize_input(x)
        output, weights = self.attend(h, key, value, mask, training, query_mask=padding_mask)
        y = self.add_residual(x, output, training)
        return (y, weights) if return_attention_scores else y
