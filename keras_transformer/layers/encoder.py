"""Encoder: a stack of self-attention + feed-forward blocks over the source."""

import keras

from keras_transformer.layers import masks
from keras_transformer.layers.attention import GlobalSelfAttention
from keras_transformer.layers.block import Block
from keras_transformer.layers.stack import BlockStack


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(Block):
    """One encoder block: GlobalSelfAttention then FeedForward.

    Args:
        d_model: int. Feature size.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Feed-forward inner size.
        dropout_rate: float. Defaults to 0.1.
        **kwargs: the other block options, with the defaults of
            `layers.options.BLOCK_OPTIONS`: `attention_dropout` (dropout on
            the attention weights, 0.0), `activation` ("relu"),
            `layer_norm_epsilon` (1e-5), `normalize_first` (pre-LN, False:
            post-LN), `hashed_dropout` (False: `keras.layers.Dropout`),
            `chunk_queries` (False: whole queries); and base layer arguments.

    Call arguments:
        x: tensor `(batch, length, d_model)`, or packed `(tokens, d_model)`
            (see `packing.py`); the output has the same form.
        padding_mask: optional bool `(batch, length)`, True at real tokens;
            required with packed `x`. Defaults to the Keras mask of `x`.
        training: bool. Enables dropout.
    """

    def __init__(self, d_model, num_heads, dff, dropout_rate=0.1, **kwargs):
        super().__init__(d_model, num_heads, dff, dropout_rate, **kwargs)
        self.self_attention = GlobalSelfAttention(
            self.d_model, self.num_heads, name="self_attention", **self.attention_options()
        )

    def build(self, input_shape):
        self.self_attention.build(input_shape)
        self.ffn.build(input_shape)
        super().build(input_shape)

    def call(self, x, padding_mask=None, training=None):
        padding_mask = masks.resolve(padding_mask, x)
        x = self.self_attention(x, padding_mask=padding_mask, training=training)
        return self.ffn(x, training=training)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(BlockStack):
    """Token ids -> contextual features: embedding, dropout, `num_layers` blocks.

    The padding mask is computed here from the token ids (id 0 is padding) and
    passed explicitly to every block; the output carries it as its Keras
    mask, for a `Decoder` called without `context_mask`. With
    `normalize_first=True` a final layer norm follows the last block, as
    pre-LN stacks need.

    Args:
        num_layers: int. Number of EncoderLayer blocks.
        d_model: int. Feature size; even.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Feed-forward inner size.
        vocab_size: int. Source vocabulary size.
        dropout_rate: float. Defaults to 0.1.
        max_length: int. Longest source sequence. Defaults to 2048.
        embedding_scale: float or None. Factor of the token embeddings; None
            is sqrt(d_model). Defaults to None.
        position_layout: str. "interleaved", "halves", "fairseq" or "learned"
            (`PositionalEmbedding`). Defaults to "interleaved".
        position_offset: int. Position t reads row t + `position_offset`.
            Defaults to 0.
        embedding_layer_norm: bool. A layer norm after the embeddings and
            positions. Defaults to False.
        **kwargs: the other block options (`attention_dropout`, `activation`,
            `layer_norm_epsilon`, `normalize_first`, `hashed_dropout`,
            `chunk_queries`), as for EncoderLayer; and base layer arguments.

    Call arguments:
        token_ids: int tensor `(batch, source_length)`, 0 for padding.
        training: bool. Enables dropout.
        packed: bool. Run the blocks on the real tokens only and return them
            packed, `(tokens, d_model)` (see `packing.py`): the same values
            at real positions without the per-token work on padding. Not
            under XLA (data-dependent shapes). Defaults to False.
        x: the tutorial's name for `token_ids`; give one of the two.

    Returns:
        tensor `(batch, source_length, d_model)`, or `(tokens, d_model)`.

    Example:
    >>> encoder = Encoder(num_layers=2, d_model=16, num_heads=2, dff=32, vocab_size=50)
    >>> encoder(np.array([[4, 5, 6, 0]])).shape
    TensorShape([1, 4, 16])
    """

    block_class = EncoderLayer
    block_name = "encoder_layer"
    blocks_attribute = "enc_layers"

    def call(self, token_ids=None, training=None, packed=False, x=None):
        x, padding_mask = self._embed(self._ids(token_ids, x), training, packed)
        for layer in self.enc_layers:
            x = layer(x, padding_mask=padding_mask, training=training)
        return self._finish(x)
