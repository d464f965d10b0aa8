"""keras_transformer: the encoder-decoder Transformer as Keras 3 layers on TensorFlow."""

from keras_transformer.layers import (
    BaseAttention,
    CausalSelfAttention,
    CrossAttention,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    GlobalSelfAttention,
    HashedDropout,
    PositionalEmbedding,
    positional_encoding,
)
from keras_transformer.model import Transformer

__version__ = "0.1.0"

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
    "PositionalEmbedding",
    "Transformer",
    "positional_encoding",
    "__version__",
]
