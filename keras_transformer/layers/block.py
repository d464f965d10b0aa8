"""What `EncoderLayer` and `DecoderLayer` share: sizes, block options and the feed-forward."""

import keras

from keras_transformer.layers import validation
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.options import (
    ATTENTION_OPTIONS,
    FEED_FORWARD_OPTIONS,
    BlockOptionsMixin,
    pop_block_options,
    select,
)


class Block(BlockOptionsMixin, keras.layers.Layer):
    """A Transformer block's common part: its attention sublayers come from the subclass.

    Args:
        d_model: int. Feature size.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Feed-forward inner size.
        dropout_rate: float. Defaults to 0.1.
        **kwargs: the other block options (`layers.options.BLOCK_OPTIONS`) and
            base layer arguments.
    """

    def __init__(self, d_model, num_heads, dff, dropout_rate=0.1, **kwargs):
        options = pop_block_options(kwargs, dropout_rate=dropout_rate)
        super().__init__(**kwargs)
        self.d_model, self.num_heads = validation.check_heads(d_model, num_heads)
        self.dff = validation.positive_int("dff", dff)
        self._set_block_options(options)
        # One output row per input position: the Keras mask of `x` is the output's too.
        self.supports_masking = True
        self.ffn = FeedForward(
            self.d_model,
            self.dff,
            dtype=self.dtype_policy,
            name="feed_forward",
            **select(options, FEED_FORWARD_OPTIONS),
        )

    def attention_options(self) -> dict:
        """Constructor arguments of the block's attention sublayers."""
        return dict(dtype=self.dtype_policy, **select(self.block_options, ATTENTION_OPTIONS))

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model, num_heads=self.num_heads, dff=self.dff, **self.block_options
        )
        return config
