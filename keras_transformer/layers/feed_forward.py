"""Position-wise feed-forward sublayer."""

from __future__ import annotations

from typing import NamedTuple

import keras

from keras_transformer.layers import backend, packing, validation
from keras_transformer.layers.residual import Residual

if backend.ON_TENSORFLOW:  # the one-token step of decoding for serving
    from keras_transformer.layers import step_ops


class FeedForwardStepWeights(NamedTuple):
    """What `FeedForward.step` reads, prepared once per search (`step_ops.py`)."""

    inner: step_ops.Projection
    output: step_ops.Projection
    norm: step_ops.Norm


@keras.saving.register_keras_serializable(package="keras_transformer")
class FeedForward(keras.layers.Layer):
    """Dense -> activation -> Dense, inside a `Residual` (dropout, sum, layer norm).

    Post-LN (default): `y = LayerNorm(x + Dropout(FFN(x)))`; pre-LN
    (`normalize_first=True`): `y = x + Dropout(FFN(LayerNorm(x)))`.

    Args:
        d_model: int. Input and output feature size.
        dff: int. Inner (hidden) size; the paper uses 4 * d_model.
        dropout_rate: float. Defaults to 0.1.
        activation: str or callable. Defaults to "relu" as in the paper.
        layer_norm_epsilon: float. Defaults to 1e-5.
        normalize_first: bool. Pre-LN instead of post-LN. Defaults to False.
        hashed_dropout: bool. Draw dropout masks with `HashedDropout`, much
            cheaper under XLA on CPU. Defaults to False (`keras.layers.Dropout`).
        **kwargs: base layer arguments.

    Call arguments:
        x: tensor `(batch, length, d_model)`, or packed `(tokens, d_model)`
            (the real tokens only, see `packing.py`): every step is per token.
        training: bool. Enables dropout.

    Example:
    >>> FeedForward(d_model=8, dff=32)(np.zeros((2, 3, 8))).shape
    TensorShape([2, 3, 8])
    """

    def __init__(
        self,
        d_model,
        dff,
        dropout_rate=0.1,
        activation="relu",
        layer_norm_epsilon=1e-5,
        normalize_first=False,
        hashed_dropout=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_model = validation.positive_int("d_model", d_model)
        self.dff = validation.positive_int("dff", dff)
        validation.check_rate("dropout_rate", dropout_rate)
        self.dropout_rate = dropout_rate
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.hashed_dropout = hashed_dropout
        # Per token: the Keras mask of `x` passes through to the output.
        self.supports_masking = True
        self.inner_dense = keras.layers.Dense(
            self.dff, activation=self.activation, dtype=self.dtype_policy, name="inner_dense"
        )
        self.output_dense = keras.layers.Dense(
            self.d_model, dtype=self.dtype_policy, name="output_dense"
        )
        self.residual = Residual(
            dropout_rate=dropout_rate,
            layer_norm_epsilon=layer_norm_epsilon,
            normalize_first=normalize_first,
            hashed_dropout=hashed_dropout,
            dtype=self.dtype_policy,
            name="residual",
        )

    def build(self, input_shape):
        self.inner_dense.build((None, None, self.d_model))
        self.output_dense.build((None, None, self.dff))
        self.residual.build((None, None, self.d_model))
        super().build(input_shape)

    def call(self, x, training=None):
        if not packing.is_packed(x):
            validation.check_features("x", x, self.d_model)
        h = self.output_dense(self.inner_dense(self.residual.normalize_input(x)))
        return self.residual.add(x, h, training)

    def step_weights(self) -> FeedForwardStepWeights:
        dtype = self.compute_dtype
        return FeedForwardStepWeights(
            step_ops.projection(self.inner_dense, dtype),
            step_ops.projection(self.output_dense, dtype),
            self.residual.step_weights(),
        )

    def step(self, x, weights: FeedForwardStepWeights):
        """The decoder's one-token step: `x` `(rows, d_model)`, no dropout (`step_ops.py`)."""
        h = self.residual.step_input(x, weights.norm)
        inner = self.activation(step_ops.dense(h, weights.inner))
        return self.residual.step_output(x, step_ops.dense(inner, weights.output), weights.norm)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            dff=self.dff,
            dropout_rate=self.dropout_rate,
            activation=keras.activations.serialize(self.activation),
            layer_norm_epsilon=self.layer_norm_epsilon,
            normalize_first=self.normalize_first,
            hashed_dropout=self.hashed_dropout,
        )
        return config
