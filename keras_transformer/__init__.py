"""keras_transformer: the encoder-decoder Transformer as Keras 3 layers on TensorFlow.

The TensorFlow tutorial's code runs against `keras_transformer.tutorial`,
which holds its names with its signatures (see there).

Where TensorFlow is not installed, the package still imports, and so does
`keras_transformer.prepared` (training batches from prepared data, numpy
only); the names below that need TensorFlow say so when used.
"""

try:
    import tensorflow
except ImportError:  # only what needs no TensorFlow loads: `keras_transformer.prepared`
    tensorflow = None

if tensorflow is not None:
    from keras_transformer.config import TrainConfig
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
    from keras_transformer.losses import MaskedLoss, masked_loss
    from keras_transformer.metrics import MaskedAccuracy, masked_accuracy
    from keras_transformer.model import Transformer
    from keras_transformer.schedules import CustomSchedule, WarmupSchedule, make_optimizer
    from keras_transformer.training import train
    from keras_transformer.translator import Translator

__version__ = "0.1.0"

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
    if name in __all__ and tensorflow is None:
        raise ImportError(
            f"keras_transformer.{name} needs TensorFlow, which is not installed here "
            "(pip install tensorflow); without it, keras_transformer.prepared loads."
        )
    raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")
