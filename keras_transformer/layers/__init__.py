"""The Transformer's building blocks as Keras 3 layers."""

from keras_transformer.layers.attention import (
    BaseAttention,
    CausalSelfAttention,
    CrossAttention,
    GlobalSelfAttention,
)
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.dropout import HashedDropout
from keras_transformer.layers.embedding import PositionalEmbedding, positional_encoding
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.masks import causal_mask, padding_mask
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.residual import Residual

__all__ = [
    "BaseAttention",
    "CausalSelfAttention",
    "CrossAttention",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "GlobalSelfAttention",
    "HashedDropout",
    "MultiHeadAttention",
    "PositionalEmbedding",
    "Residual",
    "causal_mask",
    "padding_mask",
    "positional_encoding",
]
