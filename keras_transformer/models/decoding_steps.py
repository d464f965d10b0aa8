"""The decoding step interface the searches call (`inference/`), on TensorFlow.

`DecodingStepsMixin` gives `Transformer` its one-token decoding: `decoding_start`
encodes the sources and starts the decoder's state, `decoding_step` returns the next
token's logits and the state one position longer, and `reorder_decoding_state` and
`keep_decoding_rows` follow a search's hypotheses (beam search reorders them, a search
over many rows drops those that ended). The weights a step reads are read once per
search (`step_weights`), those computed from the model's once per model when an export
freezes them (`fused_step_weights`). The arithmetic of a step lives in the decoder's
layers (`layers/step_ops.py`); this module adds the encoder, the output projection and
the hypotheses' bookkeeping. State and weights are typed `NamedTuple`s.
"""

from __future__ import annotations

from typing import NamedTuple

from keras_transformer.layers import backend
from keras_transformer.layers.decoder import DecoderState, DecoderStepWeights, FixedDecoderState

if backend.ON_TENSORFLOW:  # decoding for serving runs in TensorFlow graphs
    import tensorflow as tf

    from keras_transformer.layers.step_ops import Projection


class FusedStepWeights(NamedTuple):
    """The step's computed weights (`DecodingStepsMixin.fused_step_weights`): what an export
    freezes."""

    decoder: tuple  # per block, `DecoderLayerFusedWeights`
    projection: tf.Tensor | tuple  # tied: the table transposed `(d_model, vocab)`; else ()


class StepWeights(NamedTuple):
    """Every weight a decoding step reads (`DecodingStepsMixin.step_weights`)."""

    decoder: DecoderStepWeights
    # Its own projection; or the table transposed, with the logits bias if any.
    projection: Projection | tf.Tensor


class CachedDecodingState(NamedTuple):
    """The cached path's state: the step's weights, and the decoder's per-hypothesis
    state (key/value caches, the source's keys and values)."""

    weights: StepWeights
    decoder: DecoderState | FixedDecoderState


class UncachedDecodingState(NamedTuple):
    """The uncached path's state: the sources, re-encoded every step."""

    context_ids: tf.Tensor


# The decoder state's per-row fields (`slot_positions` is shared by all rows).
_PER_ROW = ("caches", "cross_key_values", "cross_bias")


class DecodingStepsMixin:
    """The one-token decoding of an encoder-decoder model, for the searches.

    The model that inherits it has `encode(context_ids, training)`, a `decoder`
    (`layers.Decoder`), its output projection (`final_layer`, a Dense layer, or None
    when tied to the decoder's token embeddings, with `output_bias` or None) and is
    called on `(context_ids, target_in_ids)` for logits: `Transformer`.
    """

    def fused_step_weights(self) -> FusedStepWeights:
        """The step's weights that are computed from the model's rather than read as
        they are: each decoder block's fused projections (`Decoder.fused_step_weights`)
        and, with the output projection tied to the embeddings, the table transposed.

        `decoding_start` computes them once per search; a translator built with
        `freeze_weights=True` (what an export saves) keeps them as variables, so
        that a call does not: the table's transpose alone is a few milliseconds of
        a one-sentence call.
        """
        backend.require_tensorflow("Decoding")
        projection = ()
        if self.final_layer is None:
            # Transposed here, once: the step's matmul by the table itself
            # (`transpose_b`) is slower on TensorFlow's Eigen kernels (the default on
            # AVX2 CPUs; benchmarks/RESULTS.md, "Figures behind design choices"), and
            # it is a step's largest op.
            table = tf.cast(tf.convert_to_tensor(self.decoder.token_embeddings), self.compute_dtype)
            projection = tf.transpose(table)
        return FusedStepWeights(self.decoder.fused_step_weights(), projection)

    def step_weights(self, fused=None) -> StepWeights:
        """Every weight a decoding step reads, as tensors: read once per search (for a
        translator: once per sub-batch), outside the step loop.

        Args:
            fused: `fused_step_weights()` computed before (tensors or
                variables), or None to compute them here.
        """
        if fused is None:
            fused = self.fused_step_weights()
        if self.final_layer is None:
            projection = tf.convert_to_tensor(fused.projection)
            if self.output_bias is not None:  # the tied table and the bias
                projection = Projection(
                    projection, tf.cast(tf.convert_to_tensor(self.output_bias), projection.dtype)
                )
        else:
            dtype = self.compute_dtype
            projection = Projection(
                tf.cast(tf.convert_to_tensor(self.final_layer.kernel), dtype),
                tf.cast(tf.convert_to_tensor(self.final_layer.bias), dtype),
            )
        return StepWeights(self.decoder.step_weights(fused.decoder), projection)

    def decoding_start(
        self,
        context_ids,
        steps,
        use_cache=True,
        beam_width=1,
        fixed_shapes=False,
        fused_weights=None,
    ):
        """The decoding state of `context_ids`, for at most `steps` generated tokens.

        Args:
            context_ids: int `(batch, source_length)`.
            steps: int, the most positions any row will decode (at most the
                model's `max_length`; the caches grow as they go, so it
                allocates nothing unless `fixed_shapes`).
            use_cache: False re-runs the encoder and the whole decoder prefix at
                every step (the tutorial's way: the reference, and the
                benchmarks' baseline). The results are the same.
            beam_width: hypotheses per source row (int or int32 scalar): each
                row's state is repeated, hypothesis k of row b at b * width + k.
            fixed_shapes: True allocates the self-attention caches for `steps`
                positions up front, so that no state changes shape from step
                to step (XLA's loops need that); same results.
            fused_weights: `fused_step_weights()` computed before (tensors or
                variables), or None to compute them here.

        Returns:
            A `CachedDecodingState` (the step's weights read once, and the
            decoder's per-hypothesis state) or an `UncachedDecodingState`, for
            `decoding_step`, `reorder_decoding_state` and `keep_decoding_rows`.
        """
        backend.require_tensorflow("Decoding")
        if not use_cache:
            return UncachedDecodingState(_repeat_rows(context_ids, beam_width))
        # The source is encoded once; cross-attention keys/values are projected
        # once per source, the decoder's weights read once per search.
        context, context_mask = self.encode(context_ids, training=False)
        state = self.decoder.step_start(
            _repeat_rows(context, beam_width),
            _repeat_rows(context_mask, beam_width),
            slots=steps if fixed_shapes else None,
        )
        return CachedDecodingState(self.step_weights(fused_weights), state)

    def decoding_step(self, tokens, index, state, matmul_attention=False):
        """Logits for the token after position `index`, and the next state.

        Args:
            tokens: int `(hypotheses, length)`: [START] then the tokens so far;
                positions up to `index` are read.
            index: int scalar, the position of the newest token; below the
                model's `max_length` (the searches stop there, `decode_length`).
            state: from `decoding_start` or the previous step.
            matmul_attention: cached, attention as batched matmuls rather than
                broadcast products (`step_ops.attend`): faster for many rows,
                slower for few; the same results.

        Returns:
            `(logits, state)`: float32 logits `(hypotheses, target_vocab_size)`.
        """
        if isinstance(state, UncachedDecodingState):
            logits = self((state.context_ids, tokens[:, : index + 1]), training=False)
            return logits[:, -1, :], state
        weights = state.weights
        features, decoder_state = self.decoder.step(
            tokens[:, index], index, weights.decoder, state.decoder, matmul_attention
        )
        if isinstance(weights.projection, Projection):
            logits = tf.nn.bias_add(
                tf.matmul(features, weights.projection.kernel), weights.projection.bias
            )
        else:  # tied: the table transposed
            logits = tf.matmul(features, weights.projection)
        return tf.cast(logits, tf.float32), state._replace(decoder=decoder_state)

    def keep_decoding_rows(self, state, rows):
        """`state` for the hypotheses `rows` alone, in that order: every per-hypothesis
        tensor, cross-attention's included (a search dropping rows that ended)."""
        if isinstance(state, UncachedDecodingState):
            return UncachedDecodingState(tf.gather(state.context_ids, rows))
        decoder = state.decoder
        kept = [
            tf.nest.map_structure(lambda t: tf.gather(t, rows), part)
            for part in (decoder.caches, decoder.cross_key_values, decoder.cross_bias)
        ]
        return state._replace(decoder=decoder._replace(**dict(zip(_PER_ROW, kept))))

    def reorder_decoding_state(self, state, rows):
        """`state` with hypothesis i taking what hypothesis `rows[i]` had (beam search)."""
        if isinstance(state, UncachedDecodingState):
            return state  # the uncached path reads its history from `tokens`
        # Cross-attention keys/values are the same for every hypothesis of a row.
        caches = tf.nest.map_structure(lambda t: tf.gather(t, rows), state.decoder.caches)
        return state._replace(decoder=state.decoder._replace(caches=caches))


def _repeat_rows(x, times):
    """Each row of `x` `times` times in a row (`times` an int or an int32 scalar)."""
    if isinstance(times, int) and times == 1:
        return x
    return tf.repeat(x, times, axis=0)
