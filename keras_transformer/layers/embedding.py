"""Token embedding plus the sinusoidal positional encoding of the paper."""

from __future__ import annotations

import math
from typing import NamedTuple

import keras
import numpy as np
from keras import ops

from keras_transformer.layers import backend, masks, validation

if backend.ON_TENSORFLOW:  # the one-token step of decoding for serving
    import tensorflow as tf

    from keras_transformer.layers import step_ops


class EmbeddingStepWeights(NamedTuple):
    """What `PositionalEmbedding.step` reads, prepared once per search (`step_ops.py`)."""

    table: tf.Tensor  # (vocab_size, d_model)
    positions: tf.Tensor  # (max_length, d_model), the sinusoidal encoding


# How the sines and cosines of the positional encoding are laid out along the features.
POSITION_LAYOUTS = ("interleaved", "halves")


def positional_encoding(length, depth, layout="interleaved"):
    """The sinusoidal positional encoding of Vaswani et al. (2017), section 3.5.

    PE(pos, 2i) = sin(pos / 10000^(2i/depth)) and
    PE(pos, 2i+1) = cos(pos / 10000^(2i/depth)): sines and cosines interleaved,
    exactly as the paper writes it. Every row has norm sqrt(depth / 2), and
    PE(pos + k) is a fixed block-rotation of PE(pos) for every k.

    `layout="halves"` puts the same values in another order: the sines in the
    first half of the features, the cosines in the second (Marian's and
    fairseq's layout; transformers' `MarianSinusoidalPositionalEmbedding`), so
    that checkpoints trained with it can be imported.

    Args:
        length: int. Number of positions.
        depth: int. Encoding size; must be even.
        layout: str. "interleaved" (the paper's) or "halves". Defaults to
            "interleaved".

    Returns:
        float32 numpy array of shape `(length, depth)`.
    """
    length = validation.positive_int("length", length)
    depth = validation.positive_int("depth", depth)
    if depth % 2:
        raise ValueError(
            "The sinusoidal encoding pairs a sine with a cosine, so `depth` must be "
            f"even. Received: depth={depth}"
        )
    positions = np.arange(length, dtype=np.float64)[:, None]  # (length, 1)
    pair_index = np.arange(depth // 2, dtype=np.float64)[None, :]  # (1, depth/2)
    angles = positions / np.power(10000.0, 2.0 * pair_index / depth)
    check_position_layout(layout)
    encoding = np.empty((length, depth), dtype=np.float64)
    if layout == "halves":
        encoding[:, : depth // 2] = np.sin(angles)
        encoding[:, depth // 2 :] = np.cos(angles)
    else:
        encoding[:, 0::2] = np.sin(angles)
        encoding[:, 1::2] = np.cos(angles)
    return encoding.astype(np.float32)


def check_position_layout(layout) -> None:
    if layout not in POSITION_LAYOUTS:
        raise ValueError(
            f"`position_layout` must be one of {POSITION_LAYOUTS}. Received: "
            f"position_layout={layout!r}"
        )


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEmbedding(keras.layers.Layer):
    """Token embedding scaled by sqrt(d_model) (or `embedding_scale`) plus the
    sinusoidal encoding.

    Its output carries a Keras mask, True where the id is not padding (0),
    which the attention layers and blocks use when called without an
    explicit mask (the tutorial's way). The stacks build their masks from
    the ids and pass them explicitly.

    Args:
        vocab_size: int. Number of token ids.
        d_model: int. Embedding size; even.
        max_length: int. Longest sequence the layer accepts. Defaults to 2048.
        embedding_scale: float or None. The factor of the token embeddings;
            None is the paper's sqrt(d_model). Marian checkpoints without
            `scale_embedding` use 1.0. Defaults to None.
        position_layout: str. "interleaved" (the paper's sine, cosine pairs)
            or "halves" (the sines, then the cosines: Marian's); see
            `positional_encoding`. Defaults to "interleaved".
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        token_ids: int tensor `(batch, length)`.
        start_position: int scalar. Position of the first token, for
            incremental decoding; past `max_length` it raises (a value traced by
            `jax.jit` is not checked, see `backend.checked`). Defaults to 0.

    Returns:
        tensor `(batch, length, d_model)` in the compute dtype.

    Example:
    >>> layer = PositionalEmbedding(vocab_size=100, d_model=8)
    >>> layer(np.array([[5, 6, 0]])).shape
    TensorShape([1, 3, 8])
    """

    def __init__(
        self,
        vocab_size,
        d_model,
        max_length=2048,
        embedding_scale=None,
        position_layout="interleaved",
        **kwargs,
    ):
        super().__init__(**kwargs)
        vocab_size = validation.positive_int("vocab_size", vocab_size)
        d_model = validation.positive_int("d_model", d_model)
        max_length = validation.positive_int("max_length", max_length)
        if d_model % 2:
            raise ValueError(
                f"The sinusoidal encoding needs an even `d_model`. Received: d_model={d_model}"
            )
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.max_length = max_length
        if embedding_scale is not None:
            embedding_scale = float(embedding_scale)
            if not (math.isfinite(embedding_scale) and embedding_scale > 0):
                raise ValueError(
                    "`embedding_scale` must be a positive number or None (sqrt(d_model)). "
                    f"Received: embedding_scale={embedding_scale}"
                )
        self.embedding_scale = embedding_scale
        check_position_layout(position_layout)
        self.position_layout = position_layout
        self.embedding = keras.layers.Embedding(
            vocab_size, d_model, dtype=self.dtype_policy, name="token_embedding"
        )
        self._encoding = positional_encoding(max_length, d_model, position_layout)

    @property
    def scale(self) -> float:
        """The factor of the token embeddings: `embedding_scale`, or sqrt(d_model)."""
        return math.sqrt(self.d_model) if self.embedding_scale is None else self.embedding_scale

    def build(self, input_shape):
        self.embedding.build(input_shape)
        super().build(input_shape)

    def call(self, token_ids, start_position=0):
        validation.check_token_ids("token_ids", token_ids)
        length = ops.shape(token_ids)[1]
        static_length = token_ids.shape[1]
        if static_length is not None and static_length > self.max_length:
            raise ValueError(
                f"Sequence length {static_length} exceeds max_length={self.max_length}."
            )
        with backend.checked(
            start_position + length <= self.max_length,
            f"Sequence longer than max_length={self.max_length}",
        ):
            encoding = ops.slice(
                ops.cast(self._encoding, self.compute_dtype),
                (start_position, 0),
                (length, self.d_model),
            )
        x = self.embedding(token_ids)
        x = x * ops.cast(self.scale, self.compute_dtype)
        return x + ops.expand_dims(encoding, 0)

    @property
    def table(self):
        """The token embeddings `(vocab_size, d_model)`: a tied output projection
        multiplies by their transpose, and a shared embedding is this layer itself."""
        return self.embedding.embeddings

    # -- the one-token step of decoding (TensorFlow, `step_ops.py`) --

    def step_weights(self) -> EmbeddingStepWeights:
        dtype = self.compute_dtype
        return EmbeddingStepWeights(
            step_ops.tensor(self.table, dtype), tf.constant(self._encoding, dtype=dtype)
        )

    def step(self, token_ids, index, weights: EmbeddingStepWeights):
        """Int `(rows,)` ids at position `index` -> `(rows, d_model)`."""
        table = weights.table
        x = tf.gather(table, token_ids) * tf.cast(self.scale, table.dtype)
        return x + tf.gather(weights.positions, index)

    def compute_mask(self, token_ids, previous_mask=None):
        return masks.padding_mask(token_ids)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            max_length=self.max_length,
            embedding_scale=self.embedding_scale,
            position_layout=self.position_layout,
        )
        return config
