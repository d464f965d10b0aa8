"""Decoder: causal self-attention, cross-attention and feed-forward blocks."""

import keras

from keras_transformer.layers import masks, packing, validation
from keras_transformer.layers.attention import CausalSelfAttention, CrossAttention
from keras_transformer.layers.dropout import make_dropout
from keras_transformer.layers.embedding import PositionalEmbedding
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.layer_norm import LayerNormalization


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(keras.layers.Layer):
    """One decoder block: CausalSelfAttention, CrossAttention, FeedForward.

    Args:
        d_model: int. Feature size.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Feed-forward inner size.
        dropout_rate: float. Defaults to 0.1.
        attention_dropout: float. Dropout on attention weights. Defaults to 0.0.
        activation: str. Feed-forward activation. Defaults to "relu".
        layer_norm_epsilon: float. Defaults to 1e-5.
        normalize_first: bool. Pre-LN instead of post-LN. Defaults to False.
        hashed_dropout: bool. Dropout masks from `HashedDropout` (cheap under
            XLA on CPU). Defaults to False (`keras.layers.Dropout`).
        chunk_queries: bool. Long queries attend in chunks on TensorFlow's
            CPU kernels (see `BaseAttention`). Defaults to False.
        **kwargs: base layer arguments.

    Call arguments:
        x: tensor `(batch, target_length, d_model)`, or packed
            `(tokens, d_model)` (see `packing.py`); the output has the same form.
        context: tensor `(batch, source_length, d_model)`, the encoder output,
            or packed `(source_tokens, d_model)`.
        padding_mask: optional bool `(batch, target_length)`; required with
            packed `x`.
        context_mask: optional bool `(batch, source_length)`, True at real
            source tokens.
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

    def __init__(
        self,
        d_model,
        num_heads,
        dff,
        dropout_rate=0.1,
        attention_dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-5,
        normalize_first=False,
        hashed_dropout=False,
        chunk_queries=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.dropout_rate = dropout_rate
        self.attention_dropout = attention_dropout
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.hashed_dropout = hashed_dropout
        self.chunk_queries = chunk_queries
        common = dict(
            dropout_rate=dropout_rate,
            layer_norm_epsilon=layer_norm_epsilon,
            normalize_first=normalize_first,
            hashed_dropout=hashed_dropout,
            dtype=self.dtype_policy,
        )
        self.causal_self_attention = CausalSelfAttention(
            d_model,
            num_heads,
            attention_dropout=attention_dropout,
            chunk_queries=chunk_queries,
            name="causal_self_attention",
            **common,
        )
        self.cross_attention = CrossAttention(
            d_model,
            num_heads,
            attention_dropout=attention_dropout,
            chunk_queries=chunk_queries,
            name="cross_attention",
            **common,
        )
        self.ffn = FeedForward(d_model, dff, activation=activation, name="feed_forward", **common)

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
        results = (x,)
        if cache is not None:
            results += (cache,)
        if return_attention_scores:
            results += (weights,)
        return results[0] if len(results) == 1 else results

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            num_heads=self.num_heads,
            dff=self.dff,
            dropout_rate=self.dropout_rate,
            attention_dropout=self.attention_dropout,
            activation=self.activation,
            layer_norm_epsilon=self.layer_norm_epsilon,
            normalize_first=self.normalize_first,
            hashed_dropout=self.hashed_dropout,
            chunk_queries=self.chunk_queries,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(keras.layers.Layer):
    """Target ids + encoded source -> features: embedding, `num_layers` blocks.

    Masks: decoder self-attention is causal and ignores target padding; cross
    attention ignores padded source positions when `context_mask` is given
    (the Transformer model always gives it). With `normalize_first=True` a
    final layer norm follows the last block.

    Two ways to run it:
    - `call(token_ids, context, context_mask)`: the whole target at once
      (training, scoring).
    - `init_cache(context, max_length)` then `decode_step(...)` per position:
      incremental decoding where each step computes only the new positions.

    Args:
        num_layers: int. Number of DecoderLayer blocks.
        d_model: int. Feature size; even.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Feed-forward inner size.
        vocab_size: int. Target vocabulary size.
        dropout_rate: float. Defaults to 0.1.
        max_length: int. Longest target sequence. Defaults to 2048.
        attention_dropout, activation, layer_norm_epsilon, normalize_first,
        hashed_dropout, chunk_queries:
            as for DecoderLayer.
        **kwargs: base layer arguments.

    Call arguments:
        token_ids: int tensor `(batch, target_length)`, 0 for padding.
        context: tensor `(batch, source_length, d_model)`, or packed
            `(source_tokens, d_model)` (then `context_mask` is required).
        context_mask: optional bool `(batch, source_length)`.
        training: bool. Enables dropout.
        return_attention_scores: bool. Also return a list with each layer's
            cross-attention weights `(batch, heads, target_length, source_length)`.
        packed: bool. Run the blocks on the real target tokens only and
            return them packed, `(tokens, d_model)` (see `packing.py`). Not
            under XLA. Defaults to False.

    Returns:
        tensor `(batch, target_length, d_model)` or `(tokens, d_model)` (and
        the weights if asked).
    """

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        vocab_size,
        dropout_rate=0.1,
        max_length=2048,
        attention_dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-5,
        normalize_first=False,
        hashed_dropout=False,
        chunk_queries=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_positive("num_layers", num_layers)
        validation.check_heads(d_model, num_heads)
        validation.check_positive("dff", dff)
        validation.check_rate("dropout_rate", dropout_rate)
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.vocab_size = vocab_size
        self.dropout_rate = dropout_rate
        self.max_length = max_length
        self.attention_dropout = attention_dropout
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.hashed_dropout = hashed_dropout
        self.chunk_queries = chunk_queries
        self.embedding = PositionalEmbedding(
            vocab_size, d_model, max_length, dtype=self.dtype_policy, name="embedding"
        )
        self.dropout = make_dropout(dropout_rate, hashed_dropout, self.dtype_policy)
        self.dec_layers = [
            DecoderLayer(
                d_model,
                num_heads,
                dff,
                dropout_rate=dropout_rate,
                attention_dropout=attention_dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                normalize_first=normalize_first,
                hashed_dropout=hashed_dropout,
                chunk_queries=chunk_queries,
                dtype=self.dtype_policy,
                name=f"decoder_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.final_layernorm = (
            LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="final_layernorm"
            )
            if normalize_first
            else None
        )

    def build(self, input_shape):
        self.embedding.build(input_shape)
        features = tuple(input_shape) + (self.d_model,)
        for layer in self.dec_layers:
            layer.build(features)
        if self.final_layernorm is not None:
            self.final_layernorm.build(features)
        super().build(input_shape)

    def _finish(self, x):
        return x if self.final_layernorm is None else self.final_layernorm(x)

    def call(
        self,
        token_ids,
        context,
        context_mask=None,
        training=None,
        return_attention_scores=False,
        packed=False,
    ):
        padding_mask = masks.padding_mask(token_ids)
        x = self.embedding(token_ids)
        if packed:
            x = packing.pack(x, padding_mask)
        x = self.dropout(x, training=training)
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
        x = self._finish(x)
        return (x, attention_scores) if return_attention_scores else x

    def init_cache(self, context, max_length):
        """Decoding state for `max_length` target positions.

        Cross-attention keys/values are projected here, once per source;
        self-attention caches start empty.

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

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return tuple(input_shape) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers,
            d_model=self.d_model,
            num_heads=self.num_heads,
            dff=self.dff,
            vocab_size=self.vocab_size,
            dropout_rate=self.dropout_rate,
            max_length=self.max_length,
            attention_dropout=self.attention_dropout,
            activation=self.activation,
            layer_norm_epsilon=self.layer_norm_epsilon,
            normalize_first=self.normalize_first,
            hashed_dropout=self.hashed_dropout,
            chunk_queries=self.chunk_queries,
        )
        return config
