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
    `embedding_scale`, `position_layout`, `position_offset` and
    `embedding_layer_norm` go to the `PositionalEmbedding`.
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
        embedding_scale=None,
        position_layout="interleaved",
        position_offset=0,
        embedding_layer_norm=False,
        **kwargs,
    ):
        options = pop_block_options(kwargs, dropout_rate=dropout_rate)
        super().__init__(**kwargs)
        self.num_layers = validation.positive_int("num_layers", num_layers)
        self.d_model, self.num_heads = validation.check_heads(d_model, num_heads)
        self.dff = validation.positive_int("dff", dff)
        self.vocab_size = validation.positive_int("vocab_size", vocab_size)
        self.max_length = validation.positive_int("max_length", max_length)
        self._set_block_options(options)
        self.embedding = PositionalEmbedding(
            self.vocab_size,
            self.d_model,
            self.max_length,
            embedding_scale=embedding_scale,
            position_layout=position_layout,
            position_offset=position_offset,
            normalize=embedding_layer_norm,
            layer_norm_epsilon=options["layer_norm_epsilon"],
            dtype=self.dtype_policy,
            name="embedding",
        )
        self.dropout = make_dropout(dropout_rate, options["hashed_dropout"], self.dtype_policy)
        blocks = [
            self.block_class(
                self.d_model,
                self.num_heads,
                self.dff,
                dtype=self.dtype_policy,
                name=f"{self.block_name}_{i}",
                **options,
            )
            for i in range(self.num_layers)
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
    def token_embeddings(self):
        """The embedding table `(vocab_size, d_model)` (a tied output projection's)."""
        return self.embedding.table

    def share_embedding(self, other: "BlockStack") -> None:
        """Embed with `other`'s token table (the paper's shared source and target
        embeddings): one layer object, tracked by both. Where each stack has positions
        or a layer norm of its own (mBART's learned positions and `layernorm_embedding`),
        only the token table is shared; otherwise the whole embedding layer, as models
        saved before those options were written."""
        if self.embedding.position_layout == "learned" or self.embedding.normalize:
            self.embedding.embedding = other.embedding.embedding
        else:
            self.embedding = other.embedding

    @property
    def _blocks(self):
        return getattr(self, self.blocks_attribute)

    # `build` and `compute_output_shape` name their arguments after the call's
    # (`token_ids`, the tutorial's `x`), so that Keras gives them the ids'
    # shape however the ids are passed (by default it passes the first tensor
    # argument's: the context's for `decoder(x=ids, context=...)`).

    def build(self, token_ids_shape=None, x_shape=None):
        self.embedding.build((None, None))
        features = (None, None, self.d_model)
        for block in self._blocks:
            block.build(features)
        if self.final_layernorm is not None:
            self.final_layernorm.build(features)
        super().build(x_shape if token_ids_shape is None else token_ids_shape)

    @staticmethod
    def _ids(token_ids, x):
        """The token ids, given as `token_ids` or under the tutorial's name `x`."""
        if (token_ids is None) == (x is None):
            received = "neither" if token_ids is None else "both"
            raise ValueError(
                "Give the token ids once, as `token_ids` or as `x` (the tutorial's name). "
                f"Received {received}."
            )
        return x if token_ids is None else token_ids

    def _embed(self, token_ids, training=None, packed=False, start_position=0):
        """`(x, padding_mask)`: the embedded ids after dropout, packed if asked."""
        padding_mask = masks.padding_mask(token_ids)
        x = self.embedding(token_ids, start_position=start_position)
        if packed:
            x = packing.pack(x, padding_mask)
        return self.dropout(x, training=training), padding_mask

    def _finish(self, x):
        return x if self.final_layernorm is None else self.final_layernorm(x)

    def compute_output_shape(self, token_ids_shape=None, x_shape=None):
        ids_shape = x_shape if token_ids_shape is None else token_ids_shape
        return tuple(ids_shape) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers,
            d_model=self.d_model,
            num_heads=self.num_heads,
            dff=self.dff,
            vocab_size=self.vocab_size,
            max_length=self.max_length,
            embedding_scale=self.embedding.embedding_scale,
            position_layout=self.embedding.position_layout,
            position_offset=self.embedding.position_offset,
            embedding_layer_norm=self.embedding.normalize,
            **self.block_options,
        )
        return config
