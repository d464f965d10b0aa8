"""The encoder-decoder Transformer (`transformer.py`): the layers composed into a
`keras.Model`, its training step and the decoding step interface of the searches."""

from keras_transformer.models.transformer import Transformer

__all__ = ["Transformer"]
