"""The tutorial's attention sublayers: `MultiHeadAttention` inside a `Residual`.

Each is a thin composition, as in the TensorFlow tutorial (`self.mha` plus a
residual connection and layer norm): the attention core lives in
`multi_head_attention.py` and the residual wrapper, which `FeedForward`
shares, in `residual.py`. What each subclass adds is its choice of keys and
values and its mask.

All masks are passed explicitly (see `masks.py`); the layers never read or
produce Keras' implicit `_keras_mask`.
"""

import keras
import tensorflow as tf

from keras_transformer.layers import masks, packing, validation
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.residual import Residual


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
        self.mha = MultiHeadAttention(
            num_heads,
            self.head_size,
            d_model,
            attention_dropout=attention_dropout,
            hashed_dropout=hashed_dropout,
            chunk_queries=chunk_queries,
            dtype=self.dtype_policy,
            name="mha",
        )
        self.residual = Residual(
            dropout_rate=dropout_rate,
            layer_norm_epsilon=layer_norm_epsilon,
            normalize_first=normalize_first,
            hashed_dropout=hashed_dropout,
            dtype=self.dtype_policy,
            name="residual",
        )

    def build(self, input_shape):
        self.mha.build()
        self.residual.build((None, None, self.d_model))
        super().build(input_shape)

    def project_key_value(self, x, padding_mask=None):
        """Keys and values of `x` in heads (see `MultiHeadAttention.project_key_value`)."""
        return self.mha.project_key_value(x, padding_mask)

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
        h = self.residual.normalize_input(x)
        key, value = self.mha.project_key_value(h, padding_mask)
        output, weights = self.mha.attend(h, key, value, mask, training, query_mask=padding_mask)
        y = self.residual.add(x, output, training)
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
        return self.mha.empty_cache(batch_size, max_length, dtype)

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
        if cache is not None and cache_index is None:
            raise ValueError("`cache_index` is required when `cache` is given.")
        h = self.residual.normalize_input(x)
        key, value = self.mha.project_key_value(h, padding_mask)
        if cache is None:
            length = tf.shape(key)[2]
            mask = masks.causal_mask(length, length)[None, :, :]
            if padding_mask is not None:
                mask = tf.logical_and(mask, masks.key_mask(padding_mask))
        else:
            cache = self.mha.update_cache(cache, key, value, cache_index)
            key, value = cache
            mask = masks.causal_mask(tf.shape(x)[1], tf.shape(key)[2], cache_index)[None, :, :]
        output, weights = self.mha.attend(h, key, value, mask, training, query_mask=padding_mask)
        y = self.residual.add(x, output, training)
        results = (y,)
        if cache is not None:
            results += (cache,)
        if return_attention_scores:
            results += (weights,)
        return results[0] if len(results) == 1 else results


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
            context_key_value = self.mha.project_key_value(context, context_mask)
        key, value = context_key_value
        mask = None if context_mask is None else masks.key_mask(context_mask)
        h = self.residual.normalize_input(x)
        output, weights = self.mha.attend(h, key, value, mask, training, query_mask=padding_mask)
        y = self.residual.add(x, output, training)
        return (y, weights) if return_attention_scores else y
