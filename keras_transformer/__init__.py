"""keras_transformer: the encoder-decoder Transformer as Keras 3 layers.

The layers, the model, the loss, the metrics, the schedules and `train` from
prepared data run on every Keras backend (TensorFlow, JAX, PyTorch: set
`KERAS_BACKEND`). Tokenizing text, decoding for serving and export run on
TensorFlow (with tensorflow-text).

The TensorFlow tutorial's code runs against `keras_transformer.tutorial`,
which holds its names with its signatures (see there).

Where TensorFlow is not installed, the package still imports; the names below
that need TensorFlow say so when used.
"""

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
from keras_transformer.models.transformer import Transformer
from keras_transformer.training import train
from keras_transformer.training.config import TrainConfig
from keras_transformer.training.losses import MaskedLoss, masked_loss
from keras_transformer.training.metrics import MaskedAccuracy, masked_accuracy
from keras_transformer.training.schedules import CustomSchedule, WarmupSchedule, make_optimizer

try:
    import tensorflow
except ImportError:  # serving needs TensorFlow; the layers and prepared data do not
    tensorflow = None

if tensorflow is not None:
    from keras_transformer.inference.translator import Translator

# The names that need TensorFlow.
_TENSORFLOW_NAMES = ("Translator",)

__version__ = "0.3.0"

__all__ = [
    "BaseAttention",
    "CausalSelfAttention",
    "CrossAttention",
    "CustomSchedule",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "GlobalSelfAttention",
    "HashedDropout",
    "MaskedAccuracy",
    "MaskedLoss",
    "PositionalEmbedding",
    "TrainConfig",
    "Transformer",
    "Translator",
    "WarmupSchedule",
    "make_optimizer",
    "masked_accuracy",
    "masked_loss",
    "positional_encoding",
    "train",
    "__version__",
]


def __getattr__(name: str):
    if name in _TENSORFLOW_NAMES and tensorflow is None:
        raise ImportError(
            f"keras_transformer.{name} needs TensorFlow, which is not installed here "
            "(pip install tensorflow tensorflow-text): decoding for serving runs on it."
        )
    raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")
