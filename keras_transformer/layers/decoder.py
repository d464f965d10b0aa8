"""Decoder: causal self-attention, cross-attention and feed-forward blocks."""

import keras

from keras_transformer.layers import backend, masks
from keras_transformer.layers.attention import CausalSelfAttention, CrossAttention
from keras_transformer.layers.block import Block
from keras_transformer.layers.stack import BlockStack


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
        cache: optional self-attention `(key_cache, value_cache)`; see
            `CausalSelfAttention`. With it, `cache_index` is required and the
            updated cache is returned after the output.
        cache_index: int scalar, absolute position of `x[:, 0]`.
        context_key_value: optional cross-attention keys/values computed once
            per source (`cross_attention.project_key_value(context)`).
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
        cache=None,
        cache_index=None,
        context_key_value=None,
        training=None,
        return_attention_scores=False,
    ):
        padding_mask = masks.resolve(padding_mask, x)
        context_mask = masks.resolve(context_mask, context)
        if cache is None:
            x = self.causal_self_attention(x, padding_mask=padding_mask, training=training)
        else:
            x, cache = self.causal_self_attention(
                x, cache=cache, cache_index=cache_index, training=training
            )
        x, weights = self.cross_attention(
            x,
            context=context,
            context_mask=context_mask,
            context_key_value=context_key_value,
            padding_mask=padding_mask,
            training=training,
            return_attention_scores=True,
        )
        x = self.ffn(x, training=training)
        if backend.is_concrete(weights):
            self.last_attn_scores = weights
        results = (x,)
        if cache is not None:
            results += (cache,)
        if return_attention_scores:
            results += (weights,)
        return results[0] if len(results) == 1 else results


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
    - `init_cache(context, max_length)` then `decode_step(...)` per position:
      incremental decoding where each step computes only the new positions.
      `Transformer.decoding_start` / `decoding_step` wrap these for the searches.

    Args:
        num_layers: int. Number of DecoderLayer blocks.
        d_model: int. Feature size; even.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Feed-forward inner size.
        vocab_size: int. Target vocabulary size.
        dropout_rate: float. Defaults to 0.1.
        max_length: int. Longest target sequence. Defaults to 2048.
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

    def init_cache(self, context, max_length=None):
        """Decoding state for incremental decoding (`decode_step`).

        Cross-attention keys/values are projected here, once per source;
        self-attention caches start empty and grow by the positions each step
        writes, up to the embedding's `max_length` (the argument is accepted
        for callers that name their bound).

        Returns:
            dict with "self" and "cross": lists (one per layer) of
            `(key, value)` pairs, each `(batch, heads, length, head_size)`.
        """
        batch_size = keras.ops.shape(context)[0]
        return {
            "self": [
                layer.causal_self_attention.empty_cache(batch_size, max_length)
                for layer in self.dec_layers
            ],
            "cross": [
                layer.cross_attention.project_key_value(context) for layer in self.dec_layers
            ],
        }

    def decode_step(self, token_ids, cache, index, context_mask=None):
        """Features for the target positions `index .. index + len - 1`.

        Args:
            token_ids: int tensor `(batch, new_length)`; usually one position.
            cache: from `init_cache` or the previous step.
            index: int scalar, absolute position of `token_ids[:, 0]`.
            context_mask: optional bool `(batch, source_length)`.

        Returns:
            `(features, cache)`: features `(batch, new_length, d_model)` and
            the cache with the new positions written in.
        """
        x = self.embedding(token_ids, start_position=index)
        new_self_caches = []
        for layer, self_cache, cross_kv in zip(self.dec_layers, cache["self"], cache["cross"]):
            x, self_cache = layer(
                x,
                context_mask=context_mask,
                cache=self_cache,
                cache_index=index,
                context_key_value=cross_kv,
            )
            new_self_caches.append(self_cache)
        return self._finish(x), {"self": new_self_caches, "cross": cache["cross"]}
