"""The encoder-decoder Transformer as a Keras model."""

import keras
import tensorflow as tf

from keras_transformer import losses
from keras_transformer.constants import PAD_ID
from keras_transformer.layers import Decoder, Encoder, masks, packing, validation

# The model's own options beyond the block options (`layers.options.BLOCK_OPTIONS`),
# with their defaults.
MODEL_OPTIONS = {
    "max_length": 2048,
    "tie_embeddings": False,
    "share_embeddings": False,
    "skip_padding": True,
}

# Options that change how a training step computes, not the model it trains: they
# stay out of a run's config.json "model", so a run may resume with them switched.
STEP_OPTIONS = ("hashed_dropout", "chunk_queries", "skip_padding")


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """Encoder-decoder Transformer (Vaswani et al., 2017): ids in, logits out.

    `model((context_ids, target_in_ids))` returns float32 logits of shape
    `(batch, target_length, target_vocab_size)`. Id 0 is padding in both
    inputs; the padding masks are computed from the ids and passed explicitly
    to every attention call, so appending padding to either input leaves the
    logits at real positions unchanged, and position t never sees targets
    after t.

    Args:
        num_layers: int. Blocks in the encoder and in the decoder.
        d_model: int. Feature size; even and divisible by `num_heads`.
        num_heads: int. Attention heads (each of size `d_model // num_heads`).
        dff: int. Feed-forward inner size.
        input_vocab_size: int. Source vocabulary size.
        target_vocab_size: int. Target vocabulary size.
        dropout_rate: float. Defaults to 0.1.
        max_length: int. Longest source or target sequence. Defaults to 2048.
        normalize_first: bool. Pre-LN blocks (plus a final layer norm) instead
            of the paper's post-LN. Defaults to False.
        tie_embeddings: bool. Use the target embedding matrix (transposed) as
            the output projection (paper section 3.4). Defaults to False.
        share_embeddings: bool. One embedding for source and target; the
            vocabularies must then be the same size. Defaults to False.
        activation: str. Feed-forward activation. Defaults to "relu".
        layer_norm_epsilon: float. Defaults to 1e-5.
        attention_dropout: float. Dropout on attention weights. Defaults to 0.0.
        hashed_dropout: bool. Draw every dropout mask with `HashedDropout`
            instead of `keras.layers.Dropout`: the same Bernoulli masks from an
            integer hash, several times cheaper when the training step is
            XLA-compiled on CPU. Defaults to False.
        skip_padding: bool. In `fit` / `train_on_batch` without XLA, run every
            per-token step (projections, feed-forward, layer norms, dropout,
            vocabulary projection and loss) on the real tokens only, packed
            (see `layers/packing.py`); attention still sees the padded layout.
            The same loss and gradients as the padded batch, without the work
            on padded positions (see `train_step`). Defaults to True.
        chunk_queries: bool. On TensorFlow's CPU kernels (no GPU, no XLA),
            long queries attend in chunks small enough for TensorFlow's
            batched matmul to use every thread (see `layers/query_chunks.py`);
            the same results, faster from 33 tokens at head size 16, but
            the first step traces about 3x longer (five graph branches per
            attention layer, for lengths known only at run time).
            Defaults to False.
        **kwargs: base model arguments (`name`, `dtype`, ...).

    Example:
    >>> model = Transformer(num_layers=2, d_model=16, num_heads=2, dff=32,
    ...                     input_vocab_size=50, target_vocab_size=60)
    >>> model((np.array([[5, 6, 0]]), np.array([[2, 7]]))).shape
    TensorShape([1, 2, 60])
    """

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        input_vocab_size,
        target_vocab_size,
        dropout_rate=0.1,
        max_length=2048,
        normalize_first=False,
        tie_embeddings=False,
        share_embeddings=False,
        activation="relu",
        layer_norm_epsilon=1e-5,
        attention_dropout=0.0,
        hashed_dropout=False,
        skip_padding=True,
        chunk_queries=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_positive("input_vocab_size", input_vocab_size)
        validation.check_positive("target_vocab_size", target_vocab_size)
        if share_embeddings and input_vocab_size != target_vocab_size:
            raise ValueError(
                "share_embeddings=True needs one vocabulary for source and target. "
                f"Received: input_vocab_size={input_vocab_size}, "
                f"target_vocab_size={target_vocab_size}"
            )
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.input_vocab_size = input_vocab_size
        self.target_vocab_size = target_vocab_size
        self.dropout_rate = dropout_rate
        self.max_length = max_length
        self.normalize_first = normalize_first
        self.tie_embeddings = tie_embeddings
        self.share_embeddings = share_embeddings
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.attention_dropout = attention_dropout
        self.hashed_dropout = hashed_dropout
        self.skip_padding = skip_padding
        self.chunk_queries = chunk_queries
        # Set only while `train_step` traces the packed path (see there).
        self._real_positions = None
        common = dict(
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            dropout_rate=dropout_rate,
            max_length=max_length,
            attention_dropout=attention_dropout,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            normalize_first=normalize_first,
            hashed_dropout=hashed_dropout,
            chunk_queries=chunk_queries,
            dtype=self.dtype_policy,
        )
        self.encoder = Encoder(vocab_size=input_vocab_size, name="encoder", **common)
        self.decoder = Decoder(vocab_size=target_vocab_size, name="decoder", **common)
        if share_embeddings:
            # One layer object, tracked once: its weights are shared.
            self.decoder.embedding = self.encoder.embedding
        self.final_layer = (
            None
            if tie_embeddings
            else keras.layers.Dense(target_vocab_size, dtype=self.dtype_policy, name="final_layer")
        )

    def build(self, input_shape):
        _check_pair(input_shape, "input_shape")
        context_shape, target_shape = input_shape
        self.encoder.build(context_shape)
        self.decoder.build(target_shape)
        if self.final_layer is not None:
            self.final_layer.build(tuple(target_shape) + (self.d_model,))
        super().build(input_shape)

    def encode(self, context_ids, training=None):
        """Encoder output and source padding mask for `context_ids`."""
        return self.encoder(context_ids, training=training), masks.padding_mask(context_ids)

    def project(self, features):
        """Decoder features `(..., d_model)` -> float32 logits `(..., target_vocab_size)`."""
        if self.final_layer is None:
            table = self.decoder.embedding.embedding.embeddings
            logits = tf.matmul(features, tf.cast(table, features.dtype), transpose_b=True)
        else:
            logits = self.final_layer(features)
        # Logits in float32 so that softmax and loss are stable under mixed precision.
        return tf.cast(logits, tf.float32)

    def call(self, inputs, training=None, return_attention_scores=False):
        _check_pair(inputs, "inputs")
        context_ids, target_ids = inputs
        validation.check_token_ids("context_ids", context_ids)
        validation.check_token_ids("target_in_ids", target_ids)
        if training and self._real_positions is not None:
            return self._call_packed(context_ids, target_ids)
        context, context_mask = self.encode(context_ids, training=training)
        decoded = self.decoder(
            target_ids,
            context,
            context_mask=context_mask,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        if return_attention_scores:
            features, attention_scores = decoded
            return self.project(features), attention_scores
        return self.project(decoded)

    def _call_packed(self, context_ids, target_ids):
        """Training logits `(real_labels, vocab)`, every block on packed real tokens."""
        context_mask = masks.padding_mask(context_ids)
        context = self.encoder(context_ids, training=True, packed=True)
        decoded = self.decoder(
            target_ids, context, context_mask=context_mask, training=True, packed=True
        )
        # The decoder's rows are the target inputs' real tokens; the labels'
        # real positions are usually the same ones, but need not be.
        features = packing.unpack(decoded, masks.padding_mask(target_ids))
        return self.project(tf.boolean_mask(features, self._real_positions))

    def train_step(self, data):
        """Keras' training step, on the real tokens only.

        A padded position costs as much as a real one in every per-token step
        (the projections, the feed-forward, the vocabulary projection and
        its softmax), while the masked loss gives it zero weight and attention
        masks it out. So when the loss is this library's masked loss, this
        step gathers the labels' real positions, and `call` runs the encoder
        and decoder on packed real tokens (`layers/packing.py`): logits
        `(real_labels, vocab)` against labels `(real_labels,)`. Loss,
        gradients and the masked metrics are those of the padded batch.

        Keras' own step runs instead under XLA (`jit_compile`), whose static
        shapes cannot hold a data-dependent count of tokens, with
        `sample_weight`, with any other loss (it may count padding), or when
        `skip_padding=False`. Compiled metrics receive the gathered labels and
        logits, so padding never reaches them.
        """
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if not self._can_skip_padding(y, sample_weight):
            return super().train_step(data)
        self._real_positions = y != PAD_ID
        try:
            return super().train_step((x, tf.boolean_mask(y, self._real_positions)))
        finally:
            self._real_positions = None

    def _can_skip_padding(self, y, sample_weight):
        return (
            self.skip_padding
            and losses.ignores_padding(self.loss)
            and not self.jit_compile
            and sample_weight is None
            and isinstance(y, tf.Tensor)
            and y.shape.rank == 2
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers,
            d_model=self.d_model,
            num_heads=self.num_heads,
            dff=self.dff,
            input_vocab_size=self.input_vocab_size,
            target_vocab_size=self.target_vocab_size,
            dropout_rate=self.dropout_rate,
            max_length=self.max_length,
            normalize_first=self.normalize_first,
            tie_embeddings=self.tie_embeddings,
            share_embeddings=self.share_embeddings,
            activation=self.activation,
            layer_norm_epsilon=self.layer_norm_epsilon,
            attention_dropout=self.attention_dropout,
            hashed_dropout=self.hashed_dropout,
            skip_padding=self.skip_padding,
            chunk_queries=self.chunk_queries,
        )
        return config


def _check_pair(inputs, what):
    """The model takes a pair (context_ids, target_in_ids), each of rank 2."""
    is_pair = isinstance(inputs, (tuple, list)) and len(inputs) == 2
    if not is_pair or any(isinstance(part, int) or part is None for part in inputs):
        raise ValueError(
            f"Transformer expects inputs (context_ids, target_in_ids). Received {what}: "
            f"{inputs if isinstance(inputs, (tuple, list)) else type(inputs).__name__}"
        )
