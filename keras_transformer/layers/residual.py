"""The residual connection and layer normalization around every sublayer.

Post-LN (the paper, default): `y = LayerNorm(x + Dropout(f(x)))`.
Pre-LN (`normalize_first=True`): `y = x + Dropout(f(LayerNorm(x)))`.

Attention and feed-forward sublayers both hold one `Residual` and call
`normalize_input` before their own work and `add` after it (in the decoder's
one-token step: `step_input` and `step_output`).
"""

import keras

from keras_transformer.layers import backend
from keras_transformer.layers.dropout import make_dropout
from keras_transformer.layers.layer_norm import LayerNormalization

if backend.ON_TENSORFLOW:  # the one-token step of decoding for serving
    from keras_transformer.layers import step_ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class Residual(keras.layers.Layer):
    """Residual sum, dropout and layer norm around a sublayer `f`.

    Args:
        dropout_rate: float. Dropout on `f`'s output before the sum. Defaults to 0.1.
        layer_norm_epsilon: float. Defaults to 1e-5.
        normalize_first: bool. Pre-LN instead of post-LN. Defaults to False.
        hashed_dropout: bool. Dropout masks from `HashedDropout`. Defaults to False.
        **kwargs: base layer arguments.

    Example:
    >>> residual = Residual(dropout_rate=0.0)
    >>> x = np.ones((1, 2, 4), "float32")
    >>> residual.add(x, residual.normalize_input(x) * 2).shape
    TensorShape([1, 2, 4])
    """

    def __init__(
        self,
        dropout_rate=0.1,
        layer_norm_epsilon=1e-5,
        normalize_first=False,
        hashed_dropout=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.dropout_rate = dropout_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.hashed_dropout = hashed_dropout
        self.supports_masking = True
        self.dropout = make_dropout(dropout_rate, hashed_dropout, self.dtype_policy, "dropout")
        self.layernorm = LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layernorm"
        )

    def build(self, input_shape):
        self.layernorm.build(input_shape)
        super().build(input_shape)

    def normalize_input(self, x):
        """What the sublayer sees: `x` itself (post-LN) or `LayerNorm(x)` (pre-LN)."""
        return self.layernorm(x) if self.normalize_first else x

    def add(self, x, sublayer_output, training=None):
        """The block's output from its input `x` and the sublayer's output."""
        y = x + self.dropout(sublayer_output, training=training)
        return y if self.normalize_first else self.layernorm(y)

    # The same two on the one-token step's `(rows, d_model)` rows (`step_ops.py`),
    # with the layer norm's weights read once (`step_weights`) and no dropout.

    def step_weights(self):
        return step_ops.norm_weights(self.layernorm)

    def step_input(self, x, norm):
        return step_ops.normalize(x, norm, self.layer_norm_epsilon) if self.normalize_first else x

    def step_output(self, x, sublayer_output, norm):
        y = x + sublayer_output
        return y if self.normalize_first else step_ops.normalize(y, norm, self.layer_norm_epsilon)

    def call(self, x, sublayer_output, training=None):
        return self.add(x, sublayer_output, training)

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            dropout_rate=self.dropout_rate,
            layer_norm_epsilon=self.layer_norm_epsilon,
            normalize_first=self.normalize_first,
            hashed_dropout=self.hashed_dropout,
        )
        return config
