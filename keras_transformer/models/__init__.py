"""The encoder-decoder Transformer: the layers composed into a `keras.Model` and its
training step (`transformer.py`), its options (`options.py`) and the decoding step
interface of the searches (`decoding_steps.py`)."""

from keras_transformer.models.transformer import Transformer

__all__ = ["Transformer"]
