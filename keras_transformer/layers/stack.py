"""What `Encoder` and `Decoder` share: embedding, dropout, `num_layers` blocks, final norm."""

import keras

from keras_transformer.layers import masks, packing, validation
from keras_transformer.layers.dropout import make_dropout
from keras_transformer.layers.embedding import PositionalEmbedding
from keras_transformer.layers.layer_norm import LayerNormalization
from keras_transformer.layers.options import BlockOptionsMixin, pop_block_options


class BlockStack(BlockOptionsMixin, keras.layers.Layer):
    """Token ids -> embedding -> dropout -> `num_layers` blocks (-> final norm).

    Subclasses name the block class and the attribute that holds the blocks
    (the tutorial's `enc_layers` / `dec_layers`). With `normalize_first=True`
    (pre-LN) a final layer norm follows the last block, as pre-LN stacks need.
    """

    block_class = None
    block_name = None  # the blocks are named block_name_0, block_name_1, ...
    blocks_attribute = None

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        vocab_size,
        dropout_rate=0.1,
        max_length=2048,
        **kwargs,
    ):
        options = pop_block_options(kwargs, dropout_rate=dropout_rate)
        super().__init__(**kwargs)
        validation.check_positive("num_layers", num_layers)
        validation.check_heads(d_model, num_heads)
        validation.check_positive("dff", dff)
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.vocab_size = vocab_size
        self.max_length = max_length
        self._set_block_options(options)
        self.embedding = PositionalEmbedding(
            vocab_size, d_model, max_length, dtype=self.dtype_policy, name="embedding"
        )
        self.dropout = make_dropout(dropout_rate, options["hashed_dropout"], self.dtype_policy)
        blocks = [
            self.block_class(
                d_model,
                num_heads,
                dff,
                dtype=self.dtype_policy,
                name=f"{self.block_name}_{i}",
                **options,
            )
            for i in range(num_layers)
        ]
        setattr(self, self.blocks_attribute, blocks)
        self.final_layernorm = (
            LayerNormalization(
                epsilon=options["layer_norm_epsilon"],
                dtype=self.dtype_policy,
                name="final_layernorm",
            )
            if options["normalize_first"]
            else None
        )

    @property
    def _blocks(self):
        return getattr(self, self.blocks_attribute)

    def build(self, input_shape):
        self.embedding.build(input_shape)
        features = tuple(input_shape) + (self.d_model,)
        for block in self._blocks:
            block.build(features)
        if self.final_layernorm is not None:
            self.final_layernorm.build(features)
        super().build(input_shape)

    def _embed(self, token_ids, training=None, packed=False, start_position=0):
        """`(x, padding_mask)`: the embedded ids after dropout, packed if asked."""
        padding_mask = masks.padding_mask(token_ids)
        x = self.embedding(token_ids, start_position=start_position)
        if packed:
            x = packing.pack(x, padding_mask)
        return self.dropout(x, training=training), padding_mask

    def _finish(self, x):
        return x if self.final_layernorm is None else self.final_layernorm(x)

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return tuple(input_shape) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers,
            d_model=self.d_model,
            num_heads=self.num_heads,
            dff=self.dff,
            vocab_size=self.vocab_size,
            max_length=self.max_length,
            **self.block_options,
        )
        return config
