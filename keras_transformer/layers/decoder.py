"""Decoder: causal self-attention, cross-attention and feed-forward blocks."""

from __future__ import annotations

from typing import NamedTuple

import keras

from keras_transformer.layers import backend, masks
from keras_transformer.layers.attention import (
    AttentionStepWeights,
    CausalSelfAttention,
    CrossAttention,
)
from keras_transformer.layers.block import Block
from keras_transformer.layers.embedding import EmbeddingStepWeights
from keras_transformer.layers.feed_forward import FeedForwardStepWeights
from keras_transformer.layers.stack import BlockStack

if backend.ON_TENSORFLOW:  # the one-token step of decoding for serving
    import tensorflow as tf

    from keras_transformer.layers import step_ops


class DecoderLayerFusedWeights(NamedTuple):
    """A block's step weights that are computed rather than read (`step_ops.py`)."""

    query_key_value: step_ops.Projection  # self-attention's, fused, the query's scaled
    cross_query: step_ops.Projection  # cross-attention's query, scaled


class DecoderLayerStepWeights(NamedTuple):
    causal: AttentionStepWeights
    cross: AttentionStepWeights
    feed_forward: FeedForwardStepWeights


class DecoderStepWeights(NamedTuple):
    """What `Decoder.step` reads, prepared once per search (`Decoder.step_weights`)."""

    tokens: EmbeddingStepWeights
    blocks: tuple[DecoderLayerStepWeights, ...]
    final_norm: step_ops.Norm | tuple  # () without a final layer norm (post-LN)


class DecoderState(NamedTuple):
    """Per-row decoding state of `Decoder.step`, leading axis the row.

    caches: per block, the self-attention `(key, value)` cache of the positions decoded
        so far, keys `(rows, heads, positions, head_size)`, values transposed
        `(rows, heads, head_size, positions)`; it grows a position a step.
    cross_key_values: per block, the source's `(key, value)`, laid out alike.
    cross_bias: float32 `(rows, 1, source_length)`, the source mask as an
        additive bias (the same for every head).
    """

    caches: tuple
    cross_key_values: tuple
    cross_bias: tf.Tensor


class FixedDecoderState(NamedTuple):
    """`DecoderState` with caches of `slots` positions from the start, written in place
    and masked beyond the step: every loop shape fixed, as XLA needs.
    `slot_positions` `(slots,)` is shared by all rows."""

    caches: tuple
    cross_key_values: tuple
    cross_bias: tf.Tensor
    slot_positions: tf.Tensor


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(Block):
    """One decoder block: CausalSelfAttention, CrossAttention, FeedForward.

    After an eager call, `last_attn_scores` holds the cross-attention
    weights `(batch, heads, target_length, source_length)` (the tutorial's
    inspection point).

    Args:
        d_model: int. Feature size.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Feed-forward inner size.
        dropout_rate: float. Defaults to 0.1.
        **kwargs: the other block options (`attention_dropout`, `activation`,
            `layer_norm_epsilon`, `normalize_first`, `hashed_dropout`,
            `chunk_queries`), with the defaults of `layers.options.BLOCK_OPTIONS`
            (see EncoderLayer); and base layer arguments.

    Call arguments:
        x: tensor `(batch, target_length, d_model)`, or packed
            `(tokens, d_model)` (see `packing.py`); the output has the same form.
        context: tensor `(batch, source_length, d_model)`, the encoder output,
            or packed `(source_tokens, d_model)`.
        padding_mask: optional bool `(batch, target_length)`; required with
            packed `x`. Defaults to the Keras mask of `x`.
        context_mask: optional bool `(batch, source_length)`, True at real
            source tokens. Defaults to the Keras mask of `context`.
        training: bool. Enables dropout.
        return_attention_scores: bool. Also return the cross-attention weights
            `(batch, heads, target_length, source_length)`.
    """

    last_attn_scores = None

    def __init__(self, d_model, num_heads, dff, dropout_rate=0.1, **kwargs):
        super().__init__(d_model, num_heads, dff, dropout_rate, **kwargs)
        self.causal_self_attention = CausalSelfAttention(
            self.d_model,
            self.num_heads,
            name="causal_self_attention",
            **self.attention_options(),
        )
        self.cross_attention = CrossAttention(
            self.d_model, self.num_heads, name="cross_attention", **self.attention_options()
        )

    def build(self, input_shape):
        self.causal_self_attention.build(input_shape)
        self.cross_attention.build(input_shape)
        self.ffn.build(input_shape)
        super().build(input_shape)

    def call(
        self,
        x,
        context=None,
        padding_mask=None,
        context_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        padding_mask = masks.resolve(padding_mask, x)
        context_mask = masks.resolve(context_mask, context)
        x = self.causal_self_attention(x, padding_mask=padding_mask, training=training)
        x, weights = self.cross_attention(
            x,
            context=context,
            context_mask=context_mask,
            padding_mask=padding_mask,
            training=training,
            return_attention_scores=True,
        )
        x = self.ffn(x, training=training)
        if backend.is_concrete(weights):
            self.last_attn_scores = weights
        return (x, weights) if return_attention_scores else x

    # -- the one-token step of decoding (TensorFlow, `step_ops.py`) --

    def fused_step_weights(self) -> DecoderLayerFusedWeights:
        return DecoderLayerFusedWeights(
            self.causal_self_attention.fused_step_weights(),
            self.cross_attention.fused_step_weights(),
        )

    def step_weights(self, fused: DecoderLayerFusedWeights) -> DecoderLayerStepWeights:
        return DecoderLayerStepWeights(
            self.causal_self_attention.step_weights(fused.query_key_value),
            self.cross_attention.step_weights(fused.cross_query),
            self.ffn.step_weights(),
        )

    def step_start(self, context, rows, slots: int = 0):
        """`(self-attention cache, cross-attention keys/values)` of one block."""
        return (
            self.causal_self_attention.empty_step_cache(rows, slots),
            self.cross_attention.step_key_value(context),
        )

    def step(self, x, weights, cache, cross_key_value, cross_bias, slots=None, matmul=False):
        """The newest position of each row: `x` `(rows, d_model)` -> `(y, cache)`
        (see `CausalSelfAttention.step` and `CrossAttention.step`)."""
        x, cache = self.causal_self_attention.step(x, weights.causal, cache, slots, matmul)
        x = self.cross_attention.step(x, weights.cross, cross_key_value, cross_bias, matmul)
        return self.ffn.step(x, weights.feed_forward), cache


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(BlockStack):
    """Target ids + encoded source -> features: embedding, `num_layers` blocks.

    Masks: decoder self-attention is causal and ignores target padding; cross
    attention ignores padded source positions when `context_mask` is given
    (the Transformer model always gives it) or `context` carries a Keras
    mask (an `Encoder`'s or a `PositionalEmbedding`'s output does). With
    `normalize_first=True` a final layer norm follows the last block.

    After an eager call, `last_attn_scores` holds the last layer's
    cross-attention weights `(batch, heads, target_length, source_length)`,
    as in the tutorial.

    Two ways to run it:
    - `call(token_ids, context, context_mask)`: the whole target at once
      (training, scoring).
    - `step_weights()` and `step_start(context, context_mask)`, then
      `step(...)` per position (on TensorFlow): incremental decoding where each
      step computes only the newest position over a key/value cache
      (`step_ops.py`). `Transformer.decoding_start` / `decoding_step` wrap
      these for the searches.

    Args:
        num_layers: int. Number of DecoderLayer blocks.
        d_model: int. Feature size; even.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Feed-forward inner size.
        vocab_size: int. Target vocabulary size.
        dropout_rate: float. Defaults to 0.1.
        max_length: int. Longest target sequence. Defaults to 2048.
        embedding_scale: float or None. Factor of the token embeddings; None
            is sqrt(d_model). Defaults to None.
        position_layout: str. "interleaved", "halves", "fairseq" or "learned"
            (`PositionalEmbedding`). Defaults to "interleaved".
        position_offset: int. Position t reads row t + `position_offset`.
            Defaults to 0.
        embedding_layer_norm: bool. A layer norm after the embeddings and
            positions. Defaults to False.
        **kwargs: the other block options (`attention_dropout`, `activation`,
            `layer_norm_epsilon`, `normalize_first`, `hashed_dropout`,
            `chunk_queries`), as for DecoderLayer; and base layer arguments.

    Call arguments:
        token_ids: int tensor `(batch, target_length)`, 0 for padding.
        context: tensor `(batch, source_length, d_model)`, or packed
            `(source_tokens, d_model)` (then `context_mask` is required).
        context_mask: optional bool `(batch, source_length)`. Defaults to
            the Keras mask of `context`.
        training: bool. Enables dropout.
        return_attention_scores: bool. Also return a list with each layer's
            cross-attention weights `(batch, heads, target_length, source_length)`.
        packed: bool. Run the blocks on the real target tokens only and
            return them packed, `(tokens, d_model)` (see `packing.py`). Not
            under XLA. Defaults to False.
        x: the tutorial's name for `token_ids` (`decoder(x=ids,
            context=...)`); give one of the two.

    Returns:
        tensor `(batch, target_length, d_model)` or `(tokens, d_model)` (and
        the weights if asked).
    """

    block_class = DecoderLayer
    block_name = "decoder_layer"
    blocks_attribute = "dec_layers"

    last_attn_scores = None

    def call(
        self,
        token_ids=None,
        context=None,
        context_mask=None,
        training=None,
        return_attention_scores=False,
        packed=False,
        x=None,
    ):
        context_mask = masks.resolve(context_mask, context)
        x, padding_mask = self._embed(self._ids(token_ids, x), training, packed)
        attention_scores = []
        for layer in self.dec_layers:
            x, weights = layer(
                x,
                context=context,
                padding_mask=padding_mask,
                context_mask=context_mask,
                training=training,
                return_attention_scores=True,
            )
            attention_scores.append(weights)
        if backend.is_concrete(attention_scores[-1]):
            self.last_attn_scores = attention_scores[-1]
        x = self._finish(x)
        return (x, attention_scores) if return_attention_scores else x

    # -- the one-token step of decoding (TensorFlow, `step_ops.py`) --

    def fused_step_weights(self) -> tuple[DecoderLayerFusedWeights, ...]:
        """The blocks' step weights that are computed, not read: what an export freezes."""
        return tuple(layer.fused_step_weights() for layer in self.dec_layers)

    def step_weights(self, fused=None) -> DecoderStepWeights:
        """Every weight `step` reads, as tensors, read once per search.

        Args:
            fused: `fused_step_weights()` computed before (tensors or
                variables), or None to compute them here.
        """
        backend.require_tensorflow("The decoder's one-token step")
        if fused is None:
            fused = self.fused_step_weights()
        else:
            fused = tf.nest.map_structure(tf.convert_to_tensor, fused)
        return DecoderStepWeights(
            self.embedding.step_weights(),
            tuple(
                layer.step_weights(layer_fused)
                for layer, layer_fused in zip(self.dec_layers, fused, strict=True)
            ),
            () if self.final_layernorm is None else step_ops.norm_weights(self.final_layernorm),
        )

    def step_start(self, context, context_mask, slots=None):
        """The state of `step` for a source: cross-attention keys/values and the
        source bias computed once, self-attention caches empty.

        Args:
            context: the encoder output `(rows, source_length, d_model)`.
            context_mask: bool `(rows, source_length)`, True at real source tokens.
            slots: None for caches that grow a position a step (`DecoderState`);
                an int for caches of `slots` positions from the start
                (`FixedDecoderState`): the same results with every loop shape
                fixed, as XLA needs, at the cost of attending over all slots.
        """
        backend.require_tensorflow("The decoder's one-token step")
        rows = tf.shape(context)[0]
        blocks = [
            layer.step_start(context, rows, 0 if slots is None else int(slots))
            for layer in self.dec_layers
        ]
        caches, cross = (tuple(part) for part in zip(*blocks))
        # (rows, 1, source): the same for every head.
        bias = masks.additive_bias(context_mask)[:, None, :]
        if slots is None:
            return DecoderState(caches, cross, bias)
        return FixedDecoderState(caches, cross, bias, tf.range(int(slots)))

    def step(self, token_ids, index, weights: DecoderStepWeights, state, matmul=False):
        """Features `(rows, d_model)` of the token after `token_ids` at `index`.

        Args:
            token_ids: int `(rows,)`, the newest token of each row.
            index: int scalar, its position.
            weights: from `step_weights`.
            state: from `step_start` or the previous step; returned with each
                layer's self-attention cache one position longer (or, of fixed
                size, written at `index`).
            matmul: attention as batched matmuls rather than broadcast products
                (`step_ops.attend`); the same results.
        """
        slots = (
            step_ops.cache_slots(state.slot_positions, index)
            if isinstance(state, FixedDecoderState)
            else None
        )
        x = self.embedding.step(token_ids, index, weights.tokens)
        caches = []
        for layer, layer_weights, cache, cross_key_value in zip(
            self.dec_layers,
            weights.blocks,
            state.caches,
            state.cross_key_values,
            strict=True,
        ):
            x, cache = layer.step(
                x, layer_weights, cache, cross_key_value, state.cross_bias, slots, matmul
            )
            caches.append(cache)
        if weights.final_norm:
            x = step_ops.normalize(x, weights.final_norm, self.layer_norm_epsilon)
        return x, state._replace(caches=tuple(caches))
