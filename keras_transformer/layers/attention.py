"""The tutorial's attention sublayers: `MultiHeadAttention` inside a `Residual`.

Each is a thin composition, as in the TensorFlow tutorial (`self.mha` plus a
residual connection and layer norm): the attention core lives in
`multi_head_attention.py` and the residual wrapper, which `FeedForward`
shares, in `residual.py`. What each subclass adds is its choice of keys and
values and its mask.

`BaseAttention` holds the core inside its residual, the config and the step's
weights; `GlobalSelfAttention` is the encoder's, `CausalSelfAttention` and
`CrossAttention` are the decoder's, each of these two with its one-token step.

Masks are passed explicitly by the stacks (see `masks.py`). Called without
one, as the tutorial calls them, the layers use the Keras mask their inputs
carry (set by `PositionalEmbedding`), and pass it on to their output.

The four classes stay in one module: the three subclasses differ from `BaseAttention`
only in their keys, values and mask, and read its weights and config directly.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
from keras import ops

from keras_transformer.layers import backend, masks, validation
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.residual import Residual

if backend.ON_TENSORFLOW:  # the one-token step of decoding for serving
    import tensorflow as tf

    from keras_transformer.layers import step_ops


class AttentionStepWeights(NamedTuple):
    """What an attention sublayer's `step` reads, prepared once per search
    (`step_ops.py`): its query projection (self-attention: query, key and value
    fused; `fused_step_weights`), its output projection and its layer norm."""

    query: step_ops.Projection
    output: step_ops.Projection
    norm: step_ops.Norm


@keras.saving.register_keras_serializable(package="keras_transformer")
class BaseAttention(keras.layers.Layer):
    """Multi-head attention wrapped in a residual connection and layer norm.

    Post-LN (the paper, default): `y = LayerNorm(x + Dropout(Attention(x)))`.
    Pre-LN (`normalize_first=True`): `y = x + Dropout(Attention(LayerNorm(x)))`.
    Subclasses choose the keys and values (the input itself, or an encoded
    context) and the mask.

    Two ways to size it:
    - the paper's, `d_model`: `num_heads` heads of `d_model // num_heads`
      dimensions each, inputs and output `d_model` wide;
    - `keras.layers.MultiHeadAttention`'s, which the TensorFlow tutorial
      uses (`num_heads=2, key_dim=512, dropout=0.1`): `num_heads` heads of
      `key_dim` dimensions each, the output as wide as the input (known when
      the layer is built), `dropout` on the attention weights and, as there,
      no dropout on the output unless `dropout_rate` asks for it.
    Both `d_model` and `key_dim` may be given when `key_dim` is
    `d_model // num_heads`.

    Masking: masks are boolean with True meaning "may attend", shaped
    `(batch, queries, keys)` or broadcastable to it, computed from token ids
    by the caller and passed explicitly. Without an explicit mask the layer
    uses the Keras mask of its inputs (`PositionalEmbedding` sets one, ids
    != 0), as the tutorial expects; an explicit mask wins. The output carries
    the Keras mask of `x`.

    Args:
        d_model: int. Size of the input and output features. Defaults to
            None (then `key_dim` is required).
        num_heads: int. Number of attention heads; must divide `d_model`.
        dropout_rate: float. Dropout on the sublayer output before the
            residual sum. Defaults to 0.1 with `d_model`, 0.0 with only
            `key_dim` (keras.layers.MultiHeadAttention has none).
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
        key_dim: int. The head size, as in keras.layers.MultiHeadAttention;
            the width then follows the input. Defaults to None.
        dropout: float. keras.layers.MultiHeadAttention's name for
            `attention_dropout`; give one of the two. Defaults to None.
        **kwargs: base layer arguments (`name`, `dtype`, ...).
    """

    def __init__(
        self,
        d_model=None,
        num_heads=None,
        dropout_rate=None,
        attention_dropout=None,
        layer_norm_epsilon=1e-5,
        normalize_first=False,
        hashed_dropout=False,
        chunk_queries=False,
        key_dim=None,
        dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        sizes = validation.check_attention_sizes(d_model, num_heads, key_dim)
        self.d_model, self.num_heads, self.key_dim, self.head_size = sizes
        if dropout_rate is None:
            dropout_rate = 0.1 if self.d_model is not None else 0.0
        validation.check_rate("dropout_rate", dropout_rate)
        self.dropout_rate = dropout_rate
        self.attention_dropout = validation.check_rate_alias(
            "attention_dropout", attention_dropout, "dropout", dropout, default=0.0
        )
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.hashed_dropout = hashed_dropout
        self.chunk_queries = chunk_queries
        self.supports_masking = True
        # The feature size of inputs and output: `d_model`, or with only
        # `key_dim` the input's, known at build (so is the core then).
        self._width = self.d_model
        self.mha = None if self._width is None else self._attention_core()
        self.residual = Residual(
            dropout_rate=dropout_rate,
            layer_norm_epsilon=layer_norm_epsilon,
            normalize_first=normalize_first,
            hashed_dropout=hashed_dropout,
            dtype=self.dtype_policy,
            name="residual",
        )

    def _attention_core(self):
        return MultiHeadAttention(
            self.num_heads,
            self.head_size,
            self._width,
            attention_dropout=self.attention_dropout,
            hashed_dropout=self.hashed_dropout,
            chunk_queries=self.chunk_queries,
            dtype=self.dtype_policy,
            name="mha",
        )

    def build(self, input_shape):
        if self.mha is None:
            width = input_shape[-1]
            if width is None:
                raise ValueError(
                    f"{type(self).__name__} built from `key_dim` takes its width from the "
                    "input, whose last dimension must be known. "
                    f"Received: input_shape={input_shape}"
                )
            self._width = int(width)
            self.mha = self._attention_core()
        self.mha.build()
        self.residual.build((None, None, self._width))
        super().build(input_shape)

    def project_key_value(self, x, padding_mask=None):
        """Keys and values of `x` in heads (see `MultiHeadAttention.project_key_value`)."""
        return self.mha.project_key_value(x, padding_mask)

    def step_weights(self, fused) -> AttentionStepWeights:
        """The step's weights, `fused` being `fused_step_weights()` (computed now or
        frozen in an export)."""
        return AttentionStepWeights(
            fused, self.mha.output_projection(), self.residual.step_weights()
        )

    def _step_output(self, x, attended, weights: AttentionStepWeights):
        output = step_ops.dense(attended, weights.output)
        return self.residual.step_output(x, output, weights.norm)

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
            key_dim=self.key_dim,
        )
        return config

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape


@keras.saving.register_keras_serializable(package="keras_transformer")
class GlobalSelfAttention(BaseAttention):
    """Self-attention where every position sees every real position (encoder).

    Args:
        d_model: int. Size of the input and output features (the paper's
            sizing: heads of `d_model // num_heads`). Defaults to None (then
            `key_dim` is required).
        num_heads: int. Number of attention heads; must divide `d_model`.
        dropout_rate: float. Dropout on the sublayer output before the
            residual sum. Defaults to 0.1 with `d_model`, 0.0 with only `key_dim`.
        attention_dropout: float. Dropout on the attention weights. Defaults to 0.0.
        layer_norm_epsilon: float. Defaults to 1e-5.
        normalize_first: bool. Pre-LN instead of post-LN. Defaults to False.
        hashed_dropout: bool. Dropout masks from `HashedDropout`. Defaults to False.
        chunk_queries: bool. Long queries attend in chunks on TensorFlow's CPU
            kernels (same results). Defaults to False.
        key_dim: int. The head size, as in `keras.layers.MultiHeadAttention`
            (the tutorial's sizing); the width then follows the input.
            Defaults to None.
        dropout: float. `keras.layers.MultiHeadAttention`'s name for
            `attention_dropout`; give one of the two. Defaults to None.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        x: tensor `(batch, length, d_model)`, or packed `(tokens, d_model)`:
            the real tokens only (see `packing.py`); the output has the
            same form.
        padding_mask: optional bool `(batch, length)`, True at real tokens;
            padded keys are never attended to. Required with packed `x`.
            Defaults to the Keras mask of `x`.
        training: bool. Enables dropout.
        return_attention_scores: bool. Also return the attention weights
            `(batch, heads, length, length)`.

    Example:
    >>> layer = GlobalSelfAttention(d_model=8, num_heads=2)
    >>> layer(np.zeros((2, 5, 8)), padding_mask=np.ones((2, 5), bool)).shape
    TensorShape([2, 5, 8])
    >>> GlobalSelfAttention(num_heads=2, key_dim=16)(np.zeros((2, 5, 8))).shape
    TensorShape([2, 5, 8])
    """

    def call(self, x, padding_mask=None, training=None, return_attention_scores=False):
        padding_mask = masks.resolve(padding_mask, x)
        validation.check_maybe_packed("x", x, self._width, padding_mask)
        mask = None if padding_mask is None else masks.key_mask(padding_mask)
        h = self.residual.normalize_input(x)
        key, value = self.mha.project_key_value(h, padding_mask)
        output, weights = self.mha.attend(h, key, value, mask, training, query_mask=padding_mask)
        y = self.residual.add(x, output, training)
        if backend.is_concrete(weights):
            self.last_attn_scores = weights
        return (y, weights) if return_attention_scores else y


@keras.saving.register_keras_serializable(package="keras_transformer")
class CausalSelfAttention(BaseAttention):
    """Self-attention where position t sees only positions <= t (decoder).

    Decoding one position at a time runs `step` instead (on TensorFlow): the
    newest position's keys and values are appended to a cache, and its query
    attends over the cache, so each decoding step costs one position instead
    of a re-run of the whole prefix (`step_ops.py`).

    Args:
        d_model: int. Size of the input and output features (the paper's
            sizing: heads of `d_model // num_heads`). Defaults to None (then
            `key_dim` is required).
        num_heads: int. Number of attention heads; must divide `d_model`.
        dropout_rate: float. Dropout on the sublayer output before the
            residual sum. Defaults to 0.1 with `d_model`, 0.0 with only `key_dim`.
        attention_dropout: float. Dropout on the attention weights. Defaults to 0.0.
        layer_norm_epsilon: float. Defaults to 1e-5.
        normalize_first: bool. Pre-LN instead of post-LN. Defaults to False.
        hashed_dropout: bool. Dropout masks from `HashedDropout`. Defaults to False.
        chunk_queries: bool. Long queries attend in chunks on TensorFlow's CPU
            kernels (same results). Defaults to False.
        key_dim: int. The head size, as in `keras.layers.MultiHeadAttention`
            (the tutorial's sizing); the width then follows the input.
            Defaults to None.
        dropout: float. `keras.layers.MultiHeadAttention`'s name for
            `attention_dropout`; give one of the two. Defaults to None.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        x: tensor `(batch, length, d_model)`, or packed `(tokens, d_model)`
            (see `packing.py`); the output has the same form.
        padding_mask: optional bool `(batch, length)`, True at real tokens.
            Required with packed `x`. Defaults to the Keras mask of `x`.
        training: bool. Enables dropout.
        return_attention_scores: bool. Also return the attention weights.

    Returns:
        `y`, then the weights if asked.
    """

    def call(self, x, padding_mask=None, training=None, return_attention_scores=False):
        padding_mask = masks.resolve(padding_mask, x)
        validation.check_maybe_packed("x", x, self._width, padding_mask)
        h = self.residual.normalize_input(x)
        key, value = self.mha.project_key_value(h, padding_mask)
        length = ops.shape(key)[2]
        mask = ops.expand_dims(masks.causal_mask(length, length), 0)
        if padding_mask is not None:
            mask = ops.logical_and(mask, masks.key_mask(padding_mask))
        output, weights = self.mha.attend(h, key, value, mask, training, query_mask=padding_mask)
        y = self.residual.add(x, output, training)
        return (y, weights) if return_attention_scores else y

    # -- the one-token step of decoding (TensorFlow, `step_ops.py`) --

    def fused_step_weights(self):
        """Query, key and value projections fused into one, the query's scaled."""
        return self.mha.fused_query_key_value()

    def empty_step_cache(self, rows, slots: int = 0):
        """An empty self-attention cache for `rows` (see `MultiHeadAttention.empty_step_cache`)."""
        return self.mha.empty_step_cache(rows, slots)

    def step(self, x, weights: AttentionStepWeights, cache, slots=None, matmul=False):
        """The newest position of each row: `x` `(rows, d_model)` -> `(y, cache)`.

        Args:
            weights: from `step_weights`.
            cache: from `empty_step_cache` or the previous step; returned one
                position longer, or with `slots` (`step_ops.CacheSlots`)
                written in place.
            matmul: attention as batched matmuls rather than broadcast products
                (`step_ops.attend`); the same results.
        """
        h = self.residual.step_input(x, weights.norm)
        query, key, value = tf.split(step_ops.dense(h, weights.query), 3, axis=1)
        cache = self.mha.append_to_step_cache(cache, key, value, slots)
        bias = None if slots is None else slots.bias
        attended = self.mha.step_attend(query, *cache, bias, matmul)
        return self._step_output(x, attended, weights), cache


@keras.saving.register_keras_serializable(package="keras_transformer")
class CrossAttention(BaseAttention):
    """Attention of decoder positions over the encoded source (the context).

    After an eager call, `last_attn_scores` holds its attention weights
    `(batch, heads, target_length, source_length)`, where the tutorial reads
    them for its plots (traced calls leave it alone: their tensors are
    symbolic).

    Args:
        d_model: int. Size of the input and output features (the paper's
            sizing: heads of `d_model // num_heads`). Defaults to None (then
            `key_dim` is required).
        num_heads: int. Number of attention heads; must divide `d_model`.
        dropout_rate: float. Dropout on the sublayer output before the
            residual sum. Defaults to 0.1 with `d_model`, 0.0 with only `key_dim`.
        attention_dropout: float. Dropout on the attention weights. Defaults to 0.0.
        layer_norm_epsilon: float. Defaults to 1e-5.
        normalize_first: bool. Pre-LN instead of post-LN. Defaults to False.
        hashed_dropout: bool. Dropout masks from `HashedDropout`. Defaults to False.
        chunk_queries: bool. Long queries attend in chunks on TensorFlow's CPU
            kernels (same results). Defaults to False.
        key_dim: int. The head size, as in `keras.layers.MultiHeadAttention`
            (the tutorial's sizing); the width then follows the input.
            Defaults to None.
        dropout: float. `keras.layers.MultiHeadAttention`'s name for
            `attention_dropout`; give one of the two. Defaults to None.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        x: tensor `(batch, target_length, d_model)`, the queries, or packed
            `(tokens, d_model)` (see `packing.py`); the output has the same form.
        context: tensor `(batch, source_length, d_model)`, the encoder output,
            or packed `(source_tokens, d_model)`.
        context_mask: optional bool `(batch, source_length)`, True at real
            source tokens; padded source positions are never attended to.
            Required with a packed `context`. Defaults to the Keras mask of
            `context`.
        context_key_value: optional `(key, value)` from `project_key_value`,
            computed once per source during decoding; `context` is then unused.
        padding_mask: optional bool `(batch, target_length)`, True at real
            target tokens: the layout of packed `x` (unused otherwise).
        training: bool. Enables dropout.
        return_attention_scores: bool. Also return the attention weights
            `(batch, heads, target_length, source_length)`, e.g. for plotting.
    """

    last_attn_scores = None

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
        validation.check_maybe_packed("x", x, self._width, padding_mask)
        if context_key_value is None:
            if context is None:
                raise ValueError("CrossAttention needs `context` or `context_key_value`.")
            context_mask = masks.resolve(context_mask, context)
            validation.check_maybe_packed(
                "context", context, self._width, context_mask, "context_mask"
            )
            context_key_value = self.mha.project_key_value(context, context_mask)
        key, value = context_key_value
        mask = None if context_mask is None else masks.key_mask(context_mask)
        h = self.residual.normalize_input(x)
        output, weights = self.mha.attend(h, key, value, mask, training, query_mask=padding_mask)
        y = self.residual.add(x, output, training)
        if backend.is_concrete(weights):
            self.last_attn_scores = weights
        return (y, weights) if return_attention_scores else y

    # -- the one-token step of decoding (TensorFlow, `step_ops.py`) --

    def fused_step_weights(self):
        """The query projection, scaled."""
        return self.mha.scaled_query()

    def step_key_value(self, context):
        """The context's keys and values in the step's layout, once per source."""
        return self.mha.step_key_value(context)

    def step(self, x, weights: AttentionStepWeights, key_value, bias, matmul=False):
        """The newest position of each row over the context: `x` `(rows, d_model)`.

        Args:
            weights: from `step_weights`.
            key_value: from `step_key_value`.
            bias: float32 `(rows, 1, source_length)`, the source mask as an
                additive bias.
            matmul: as for `CausalSelfAttention.step`.
        """
        h = self.residual.step_input(x, weights.norm)
        query = step_ops.dense(h, weights.query)
        attended = self.mha.step_attend(query, *key_value, bias, matmul)
        return self._step_output(x, attended, weights)
