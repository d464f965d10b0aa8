"""Token embedding plus positions: the paper's sinusoidal encoding, or the layouts and
learned tables of imported checkpoints (Marian, M2M-100 / NLLB, mBART)."""

from __future__ import annotations

import math
from typing import NamedTuple

import keras
import numpy as np
from keras import ops

from keras_transformer.layers import backend, masks, validation
from keras_transformer.layers.layer_norm import LayerNormalization

if backend.ON_TENSORFLOW:  # the one-token step of decoding for serving
    import tensorflow as tf

    from keras_transformer.layers import step_ops


class EmbeddingStepWeights(NamedTuple):
    """What `PositionalEmbedding.step` reads, prepared once per search (`step_ops.py`)."""

    table: tf.Tensor  # (vocab_size, d_model)
    positions: tf.Tensor  # (position_offset + max_length, d_model)
    norm: step_ops.Norm | tuple  # the embedding's layer norm, () without one


# The sinusoidal layouts (`positional_encoding`), then "learned": a trained table.
SINUSOIDAL_LAYOUTS = ("interleaved", "halves", "fairseq")
POSITION_LAYOUTS = (*SINUSOIDAL_LAYOUTS, "learned")


def positional_encoding(length, depth, layout="interleaved"):
    """The sinusoidal positional encoding of Vaswani et al. (2017), section 3.5.

    PE(pos, 2i) = sin(pos / 10000^(2i/depth)) and
    PE(pos, 2i+1) = cos(pos / 10000^(2i/depth)): sines and cosines interleaved,
    exactly as the paper writes it. Every row has norm sqrt(depth / 2), and
    PE(pos + k) is a fixed block-rotation of PE(pos) for every k.

    `layout="halves"` puts the same values in another order: the sines in the
    first half of the features, the cosines in the second (Marian's layout;
    transformers' `MarianSinusoidalPositionalEmbedding`), so that checkpoints
    trained with it can be imported. `layout="fairseq"` is tensor2tensor's and
    fairseq's: halves too, but the frequencies 10000^(-i / (depth/2 - 1)), the last
    one exactly 1/10000 (transformers' `M2M100SinusoidalPositionalEmbedding`,
    M2M-100's and NLLB's).

    Args:
        length: int. Number of positions.
        depth: int. Encoding size; must be even (at least 4 for "fairseq").
        layout: str. "interleaved" (the paper's), "halves" or "fairseq".
            Defaults to "interleaved".

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
    check_position_layout(layout)
    if layout not in SINUSOIDAL_LAYOUTS:
        raise ValueError(f"`layout` must be one of {SINUSOIDAL_LAYOUTS}. Received: {layout!r}")
    positions = np.arange(length, dtype=np.float64)[:, None]  # (length, 1)
    pair_index = np.arange(depth // 2, dtype=np.float64)[None, :]  # (1, depth/2)
    if layout == "fairseq":
        if depth < 4:
            raise ValueError(f"The fairseq layout needs depth >= 4. Received: depth={depth}")
        # As fairseq computes it, in float32 (its rounding of the frequencies).
        step = np.float32(math.log(10000) / (depth // 2 - 1))
        frequencies = np.exp(np.arange(depth // 2, dtype=np.float32) * -step)
        angles = np.arange(length, dtype=np.float32)[:, None] * frequencies[None, :]
        return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)
    angles = positions / np.power(10000.0, 2.0 * pair_index / depth)
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
    """Token embedding scaled by sqrt(d_model) (or `embedding_scale`) plus positions:
    the sinusoidal encoding, or a learned table.

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
        position_layout: str. "interleaved" (the paper's sine, cosine pairs),
            "halves" (the sines, then the cosines: Marian's), "fairseq"
            (M2M-100's and NLLB's; see `positional_encoding`) or "learned" (a
            trained table of `position_offset + max_length` rows: mBART's).
            Defaults to "interleaved".
        position_offset: int. Position t reads row t + `position_offset` of the
            positions: fairseq's models start at 2 (the padding id plus one).
            Defaults to 0.
        normalize: bool. A layer norm after the sum of token embeddings and
            positions (mBART's `layernorm_embedding`). Defaults to False.
        layer_norm_epsilon: float. Its epsilon. Defaults to 1e-5.
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
        position_offset=0,
        normalize=False,
        layer_norm_epsilon=1e-5,
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
        self.position_offset = validation.non_negative_int("position_offset", position_offset)
        self.normalize = bool(normalize)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.embedding = keras.layers.Embedding(
            vocab_size, d_model, dtype=self.dtype_policy, name="token_embedding"
        )
        rows = position_offset + max_length
        self._encoding = (
            None
            if position_layout == "learned"
            else positional_encoding(rows, d_model, position_layout)
        )
        self.position_table = None  # a learned layout's, made in `build`
        self._encoding_tensor = None  # TensorFlow: the sinusoidal table, made once
        self.layernorm = (
            LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layernorm"
            )
            if self.normalize
            else None
        )

    @property
    def scale(self) -> float:
        """The factor of the token embeddings: `embedding_scale`, or sqrt(d_model)."""
        return math.sqrt(self.d_model) if self.embedding_scale is None else self.embedding_scale

    def build(self, input_shape):
        self.embedding.build(input_shape)
        if self.position_layout == "learned":
            self.position_table = self.add_weight(
                shape=(self.position_offset + self.max_length, self.d_model),
                initializer=keras.initializers.RandomNormal(stddev=0.02),
                name="position_embeddings",
            )
        if self.layernorm is not None:
            self.layernorm.build((None, None, self.d_model))
        super().build(input_shape)

    def _positions(self):
        """Every row of the positions, `(position_offset + max_length, d_model)`."""
        if self._encoding is None:
            return ops.cast(self.position_table, self.compute_dtype)
        if backend.ON_TENSORFLOW:
            return self._shared_encoding()
        return ops.cast(self._encoding, self.compute_dtype)

    def _shared_encoding(self):
        """The sinusoidal table in the compute dtype as one eager tensor, made on first use.

        A graph that reads a numpy array holds it as a constant of its own, so an
        export held a copy in every traced function (two tables in each signature's
        loop: 12.6 of the demo's 17.3 MB saved_model.pb with six signatures, and 90 MB
        of the memory after loading it). Every graph captures this one tensor instead,
        and a SavedModel stores a captured tensor once.
        """
        dtype = self.compute_dtype
        table = self._encoding_tensor
        if table is None or table.dtype != dtype:
            with tf.init_scope():
                table = tf.cast(tf.constant(self._encoding), dtype)
            self._encoding_tensor = table
        return table

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
                self._positions(),
                (start_position + self.position_offset, 0),
                (length, self.d_model),
            )
        x = self.embedding(token_ids)
        x = x * ops.cast(self.scale, self.compute_dtype)
        x = x + ops.expand_dims(encoding, 0)
        return x if self.layernorm is None else self.layernorm(x)

    @property
    def table(self):
        """The token embeddings `(vocab_size, d_model)`: a tied output projection
        multiplies by their transpose, and a shared embedding is this layer itself."""
        return self.embedding.embeddings

    # -- the one-token step of decoding (TensorFlow, `step_ops.py`) --

    def step_weights(self) -> EmbeddingStepWeights:
        dtype = self.compute_dtype
        positions = self._positions()[self.position_offset :]
        return EmbeddingStepWeights(
            step_ops.tensor(self.table, dtype),
            tf.cast(tf.convert_to_tensor(positions), dtype),
            () if self.layernorm is None else step_ops.norm_weights(self.layernorm),
        )

    def step(self, token_ids, index, weights: EmbeddingStepWeights):
        """Int `(rows,)` ids at position `index` -> `(rows, d_model)`."""
        table = weights.table
        x = tf.gather(table, token_ids) * tf.cast(self.scale, table.dtype)
        x = x + tf.gather(weights.positions, index)
        if weights.norm:
            x = step_ops.normalize(x, weights.norm, self.layer_norm_epsilon)
        return x

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
            position_offset=self.position_offset,
            normalize=self.normalize,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config
