"""The encoder-decoder Transformer as a Keras model.

`Transformer` composes the encoder, the decoder and the output projection
(`layers/`), with the options of imported checkpoints (`embedding_scale`,
`position_layout`, `logits_bias`, ...): its forward pass, the packed training step
that runs the per-token layers on real tokens only (`train_step`, `_call_packed`), and
its config. Its options and their defaults are `options.py`; the decoding step
interface the searches call is `DecodingStepsMixin` (`decoding_steps.py`).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_transformer.constants import PAD_ID
from keras_transformer.layers import Decoder, Encoder, backend, masks, packing, validation
from keras_transformer.layers.options import BlockOptionsMixin, pop_block_options
from keras_transformer.models.decoding_steps import DecodingStepsMixin
from keras_transformer.models.options import MODEL_OPTIONS

if backend.ON_TENSORFLOW:  # the packed training step
    import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(BlockOptionsMixin, DecodingStepsMixin, keras.Model):
    """Encoder-decoder Transformer (Vaswani et al., 2017): ids in, logits out.

    `model((context_ids, target_in_ids))` returns float32 logits of shape
    `(batch, target_length, target_vocab_size)`. Id 0 is padding in both
    inputs; the padding masks are computed from the ids and passed explicitly
    to every attention call, so appending padding to either input leaves the
    logits at real positions unchanged, and position t never sees targets
    after t.

    Args:
        num_layers: int. Blocks in the encoder, and in the decoder unless
            `decoder_layers` says otherwise.
        d_model: int. Feature size; even and divisible by `num_heads`.
        num_heads: int. Attention heads (each of size `d_model // num_heads`).
        dff: int. Feed-forward inner size.
        input_vocab_size: int. Source vocabulary size.
        target_vocab_size: int. Target vocabulary size.
        dropout_rate: float. Defaults to 0.1.
        max_length: int. Longest source or target sequence. Defaults to 2048.
        tie_embeddings: bool. Use the target embedding matrix (transposed) as
            the output projection (paper section 3.4). Defaults to False.
        share_embeddings: bool. One embedding for source and target; the
            vocabularies must then be the same size. Defaults to False.
        skip_padding: bool. In `fit` / `train_on_batch` without XLA, run every
            per-token step (projections, feed-forward, layer norms, dropout,
            vocabulary projection and loss) on the real tokens only, packed
            (see `layers/packing.py`); attention still sees the padded layout.
            The same loss and gradients as the padded batch, without the work
            on padded positions (see `train_step`). Defaults to True.
        decoder_layers: int or None. Blocks in the decoder, where they differ
            from the encoder's (Marian checkpoints of uneven depths). Defaults
            to None: `num_layers`.
        embedding_scale: float or None. Factor of the token embeddings, source
            and target. Defaults to None: sqrt(d_model), the paper's (Marian's
            `scale_embedding=False` is 1.0).
        position_layout: str. "interleaved" (the paper's sine, cosine pairs),
            "halves" (the sines in the first half of the features, the
            cosines in the second: Marian's), "fairseq" (halves with
            fairseq's frequencies: M2M-100's and NLLB's) or "learned" (a
            trained table per stack: mBART's). Defaults to "interleaved".
        position_offset: int. Position t reads row t + `position_offset` of
            the positions (fairseq's models: 2). Defaults to 0.
        embedding_layer_norm: bool. A layer norm after the embeddings and
            positions of each stack (mBART's `layernorm_embedding`).
            Defaults to False.
        logits_bias: bool. Add a learned bias per target id to the tied
            output projection's logits (Marian's `final_logits_bias`); needs
            `tie_embeddings=True` (an untied projection has its own bias).
            Defaults to False.
        source_start: bool. The encoder reads the source as the tokenizers
            give it, [START] first. False drops the first id of every source
            before the encoder (its padding mask too): Marian's models read
            the words and `</s>`, without a start token, while every input
            pipeline of the library writes sources alike. Defaults to True.
        **kwargs: the block options, forwarded to every block
            (`layers.options.BLOCK_OPTIONS`, with their defaults):
            `attention_dropout` (dropout on attention weights, 0.0),
            `activation` (feed-forward, "relu"), `layer_norm_epsilon` (1e-5),
            `normalize_first` (pre-LN blocks plus a final layer norm instead
            of the paper's post-LN, False), `hashed_dropout` (every dropout
            mask from `HashedDropout`'s integer hash, several times cheaper
            when the step is XLA-compiled on CPU, False), `chunk_queries`
            (on TensorFlow's CPU kernels long queries attend in chunks, see
            `layers/query_chunks.py`: same results, faster from 33 tokens at
            head size 16, first step traced about 3x longer, False); and the
            base model arguments (`name`, `dtype`, ...).

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
        max_length=MODEL_OPTIONS["max_length"],
        tie_embeddings=MODEL_OPTIONS["tie_embeddings"],
        share_embeddings=MODEL_OPTIONS["share_embeddings"],
        skip_padding=MODEL_OPTIONS["skip_padding"],
        decoder_layers=MODEL_OPTIONS["decoder_layers"],
        embedding_scale=MODEL_OPTIONS["embedding_scale"],
        position_layout=MODEL_OPTIONS["position_layout"],
        position_offset=MODEL_OPTIONS["position_offset"],
        embedding_layer_norm=MODEL_OPTIONS["embedding_layer_norm"],
        logits_bias=MODEL_OPTIONS["logits_bias"],
        source_start=MODEL_OPTIONS["source_start"],
        **kwargs,
    ):
        block_options = pop_block_options(kwargs, dropout_rate=dropout_rate)
        super().__init__(**kwargs)
        # Python ints whatever integer type the sizes come in (the tutorial's
        # come from `get_vocab_size().numpy()`), so that the config is JSON.
        num_layers = validation.positive_int("num_layers", num_layers)
        d_model, num_heads = validation.check_heads(d_model, num_heads)
        dff = validation.positive_int("dff", dff)
        input_vocab_size = validation.positive_int("input_vocab_size", input_vocab_size)
        target_vocab_size = validation.positive_int("target_vocab_size", target_vocab_size)
        max_length = validation.positive_int("max_length", max_length)
        if decoder_layers is not None:
            decoder_layers = validation.positive_int("decoder_layers", decoder_layers)
        if logits_bias and not tie_embeddings:
            raise ValueError(
                "logits_bias=True adds a bias to the tied output projection; an untied one "
                "(tie_embeddings=False) has a bias of its own. Received: logits_bias=True, "
                "tie_embeddings=False"
            )
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
        # The signature names each option once; the dict follows MODEL_OPTIONS' list.
        arguments = locals()
        self.model_options = {name: arguments[name] for name in MODEL_OPTIONS}
        for name, value in self.model_options.items():
            setattr(self, name, value)
        self._set_block_options(block_options)
        # Set only while `train_step` traces the packed path (see there).
        self._real_positions = None
        self.output_bias = None  # the logits bias, made in `build` (`logits_bias`)
        stack = dict(
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            max_length=max_length,
            embedding_scale=embedding_scale,
            position_layout=position_layout,
            position_offset=position_offset,
            embedding_layer_norm=embedding_layer_norm,
            dtype=self.dtype_policy,
            **block_options,
        )
        self.encoder = Encoder(
            num_layers=num_layers, vocab_size=input_vocab_size, name="encoder", **stack
        )
        self.decoder = Decoder(
            num_layers=decoder_layers or num_layers,
            vocab_size=target_vocab_size,
            name="decoder",
            **stack,
        )
        if share_embeddings:
            # One layer object, tracked once: its weights are shared.
            self.decoder.share_embedding(self.encoder)
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
        self.output_bias = (
            self.add_weight(
                shape=(self.target_vocab_size,), initializer="zeros", name="logits_bias"
            )
            if self.logits_bias
            else None
        )
        super().build(input_shape)

    def encoder_ids(self, context_ids):
        """The ids the encoder reads: `context_ids`, without their first column (the
        [START]) when `source_start=False`."""
        return context_ids if self.source_start else context_ids[:, 1:]

    def encode(self, context_ids, training=None):
        """Encoder output and source padding mask for `context_ids`."""
        context_ids = self.encoder_ids(context_ids)
        return self.encoder(context_ids, training=training), masks.padding_mask(context_ids)

    def project(self, features):
        """Decoder features `(..., d_model)` -> float32 logits `(..., target_vocab_size)`."""
        if self.final_layer is None:
            table = self.decoder.token_embeddings
            logits = ops.matmul(features, ops.transpose(ops.cast(table, features.dtype)))
            if self.output_bias is not None:
                logits = logits + ops.cast(self.output_bias, features.dtype)
        else:
            logits = self.final_layer(features)
        # Logits in float32 so that softmax and loss are stable under mixed precision.
        logits = ops.cast(logits, "float32")
        # Without the target's Keras mask, which the features carry and the
        # Dense layer passes on: Keras would weight the loss by it, and our
        # loss, already masked and reduced to a scalar, cannot be weighted.
        masks.drop_keras_mask(logits)
        return logits

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
        context_ids = self.encoder_ids(context_ids)
        context_mask = masks.padding_mask(context_ids)
        context = self.encoder(context_ids, training=True, packed=True)
        decoded = self.decoder(
            target_ids, context, context_mask=context_mask, training=True, packed=True
        )
        # The decoder's rows are the target inputs' real tokens; the labels'
        # real positions are usually the same ones, but need not be.
        features = packing.unpack(decoded, masks.padding_mask(target_ids))
        return self.project(tf.boolean_mask(features, self._real_positions))

    def train_step(self, *args):
        """Keras' training step, on the real tokens only (on TensorFlow).

        A padded position costs as much as a real one in every per-token step
        (the projections, the feed-forward, the vocabulary projection and
        its softmax), while the masked loss gives it zero weight and attention
        masks it out. So when the loss says it gives padded labels no weight
        (an `ignores_padding = True` attribute: this library's `MaskedLoss`
        and `masked_loss` have it, and a loss of your own may), this step
        gathers the labels' real positions, and `call` runs the encoder and
        decoder on packed real tokens (`layers/packing.py`): logits
        `(real_labels, vocab)` against labels `(real_labels,)`. Loss,
        gradients and the masked metrics are those of the padded batch.

        Keras' own step runs instead under XLA (`jit_compile`), whose static
        shapes cannot hold a data-dependent count of tokens, with
        `sample_weight`, with any other loss (it may count padding), or when
        `skip_padding=False`. Compiled metrics receive the gathered labels and
        logits, so padding never reaches them. On JAX and PyTorch, whose
        compiled steps have static shapes, Keras' own step runs
        (`layers/backend.py`).
        """
        if not backend.PACKED_TRAINING:
            return super().train_step(*args)
        (data,) = args
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if not self._can_skip_padding(y, sample_weight):
            return super().train_step(data)
        self._real_positions = y != PAD_ID
        try:
            return super().train_step((x, tf.boolean_mask(y, self._real_positions)))
        finally:
            self._real_positions = None

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Builds the model, its loss and metrics, and its optimizer before a step is traced.

        Keras on TensorFlow does this in `fit`, `evaluate`, `train_on_batch` and
        `test_on_batch` only under a distribution strategy (JAX and PyTorch
        always do). Otherwise the optimizer's and the metrics' variables are
        created inside the first trace of the step, each through a lifted
        initializer, and TensorFlow then traces the step a second time, since
        the first trace created variables. The build reads the shapes of the
        data's elements, not a batch. Data with other elements than dense
        tensors (ragged, sparse, Python lists) is left to Keras' build inside
        the trace, as before.
        """
        if self._distribute_strategy is not None:
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
        unbuilt = (
            not all(layer.built for layer in self._flatten_layers())
            or not getattr(self._compile_metrics, "built", True)
            or not getattr(self._compile_loss, "built", True)
            or not getattr(self.optimizer, "built", True)
        )
        if not unbuilt:
            return
        if data_batch is None:
            # Without a strategy, the dataset the step iterates; other iterators' own.
            dataset = getattr(iterator, "_distributed_dataset", None)
            if not isinstance(dataset, tf.data.Dataset):
                dataset = iterator.data_adapter.get_tf_dataset()
            data_batch = dataset.element_spec
        data_batch = _dense_parts(data_batch)
        if data_batch is not None:
            self._symbolic_build(data_batch=data_batch)

    def _can_skip_padding(self, y, sample_weight):
        return (
            self.skip_padding
            and getattr(self.loss, "ignores_padding", False)
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
            **self.model_options,
            **self.block_options,
        )
        return config


def _dense_parts(structure):
    """`structure` (a batch, or its element spec) for a symbolic build: `None` where
    Keras' spec says an element is absent (`(x, y, None)` from a generator), or `None`
    as a whole when a part is not a dense tensor, array or tensor spec."""
    dense = (tf.TensorSpec, tf.Tensor, np.ndarray)
    parts = tf.nest.flatten(structure)
    if not all(part is None or isinstance(part, (tf.OptionalSpec, *dense)) for part in parts):
        return None
    return tf.nest.map_structure(
        lambda part: None if isinstance(part, tf.OptionalSpec) else part, structure
    )


def _check_pair(inputs, what):
    """The model takes a pair (context_ids, target_in_ids), each of rank 2."""
    is_pair = isinstance(inputs, (tuple, list)) and len(inputs) == 2
    if not is_pair or any(isinstance(part, int) or part is None for part in inputs):
        raise ValueError(
            f"Transformer expects inputs (context_ids, target_in_ids). Received {what}: "
            f"{inputs if isinstance(inputs, (tuple, list)) else type(inputs).__name__}"
        )
