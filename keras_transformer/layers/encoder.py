"""Encoder: a stack of self-attention + feed-forward layers over the source."""

import keras

from keras_transformer.layers import masks, packing, validation
from keras_transformer.layers.attention import GlobalSelfAttention
from keras_transformer.layers.dropout import make_dropout
from keras_transformer.layers.embedding import PositionalEmbedding
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.layer_norm import LayerNormalization


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(keras.layers.Layer):
    """One encoder block: GlobalSelfAttention then FeedForward.

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
        x: tensor `(batch, length, d_model)`, or packed `(tokens, d_model)`
            (see `packing.py`); the output has the same form.
        padding_mask: optional bool `(batch, length)`, True at real tokens;
            required with packed `x`.
        training: bool. Enables dropout.
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
        self.self_attention = GlobalSelfAttention(
            d_model,
            num_heads,
            attention_dropout=attention_dropout,
            chunk_queries=chunk_queries,
            name="self_attention",
            **common,
        )
        self.ffn = FeedForward(d_model, dff, activation=activation, name="feed_forward", **common)

    def build(self, input_shape):
        self.self_attention.build(input_shape)
        self.ffn.build(input_shape)
        super().build(input_shape)

    def call(self, x, padding_mask=None, training=None):
        x = self.self_attention(x, padding_mask=padding_mask, training=training)
        return self.ffn(x, training=training)

    def compute_output_shape(self, input_shape):
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
class Encoder(keras.layers.Layer):
    """Token ids -> contextual features: embedding, dropout, `num_layers` blocks.

    The padding mask is computed here from the token ids (id 0 is padding) and
    passed explicitly to every block. With `normalize_first=True` a final
    layer norm follows the last block, as pre-LN stacks need.

    Args:
        num_layers: int. Number of EncoderLayer blocks.
        d_model: int. Feature size; even.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Feed-forward inner size.
        vocab_size: int. Source vocabulary size.
        dropout_rate: float. Defaults to 0.1.
        max_length: int. Longest source sequence. Defaults to 2048.
        attention_dropout, activation, layer_norm_epsilon, normalize_first,
        hashed_dropout, chunk_queries:
            as for EncoderLayer.
        **kwargs: base layer arguments.

    Call arguments:
        token_ids: int tensor `(batch, source_length)`, 0 for padding.
        training: bool. Enables dropout.
        packed: bool. Run the blocks on the real tokens only and return them
            packed, `(tokens, d_model)` (see `packing.py`): the same values
            at real positions without the per-token work on padding. Not
            under XLA (data-dependent shapes). Defaults to False.

    Returns:
        tensor `(batch, source_length, d_model)`, or `(tokens, d_model)`.

    Example:
    >>> encoder = Encoder(num_layers=2, d_model=16, num_heads=2, dff=32, vocab_size=50)
    >>> encoder(np.array([[4, 5, 6, 0]])).shape
    TensorShape([1, 4, 16])
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
        self.enc_layers = [
            EncoderLayer(
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
                name=f"encoder_layer_{i}",
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
        for layer in self.enc_layers:
            layer.build(features)
        if self.final_layernorm is not None:
            self.final_layernorm.build(features)
        super().build(input_shape)

    def call(self, token_ids, training=None, packed=False):
        padding_mask = masks.padding_mask(token_ids)
        x = self.embedding(token_ids)
        if packed:
            x = packing.pack(x, padding_mask)
        x = self.dropout(x, training=training)
        for layer in self.enc_layers:
            x = layer(x, padding_mask=padding_mask, training=training)
        if self.final_layernorm is not None:
            x = self.final_layernorm(x)
        return x

    def compute_output_shape(self, input_shape):
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
