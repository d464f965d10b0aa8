"""BatchDecoder: a model's searches over batches of source ids, a bounded number of rows
at a time.

Everything between a batch's token ids and its `DecodeResult` is decided here, in one
object: how many tokens each row may generate (`LengthPolicy`), how many rows decode at
once and how many searches run side by side (the loop is `sub_batches.py`'s), the
padded shapes XLA compiles (`sub_batches.CompiledSearch`), target prefixes, n-best
lists, and the decoder's fused weights. The translator (`translator.py`) adds the
tokenizers and the traced functions that take strings; `DecodingOptions` are the
settings both are built from.
"""

from __future__ import annotations

import dataclasses
import math
import types

import tensorflow as tf

from keras_transformer.inference import scoring, sub_batches
from keras_transformer.inference.beam import BeamSearch, check_beam_settings
from keras_transformer.inference.sampling import GreedySearch
from keras_transformer.inference.search import DecodeResult, Search, decode_length

# Most generated tokens by default: the tutorial's MAX_TOKENS, and far beyond
# a sentence; the model's own max_length caps it.
DEFAULT_MAX_LENGTH = 128
# Longest source, [START] and [END] included, when the training run's own
# limit (its `max_tokens`) is not given: the training default and the
# tutorial's MAX_TOKENS. Not the model's max_length (2048 by default): the
# model has never seen sources that long, and one such row would pad its
# sub-batch to it.
DEFAULT_MAX_SOURCE_LENGTH = 128
# Rows decoded together inside one call: a call's memory is one sub-batch's
# whatever its row count, and its ops stay short enough for other calls' ops
# to run between them. Larger sub-batches decode faster on CPU (less per-step
# overhead per row); rows are sorted by length first, so padding stays small.
DEFAULT_SUB_BATCH_SIZE = 64
# Searches decoding at once, sharing that bound: one search's step is a chain
# of small ops that keeps one core busy, and a second one uses the next core.
DEFAULT_IN_FLIGHT = 2
# Each row may generate at most a * source tokens + b (fairseq's max_len_a/b).
# Generous for translation between European languages (outputs rarely pass
# 1.5x their source in subwords), yet a row that never ends stops early.
DEFAULT_MAX_LENGTH_A = 1.5
DEFAULT_MAX_LENGTH_B = 10
# With `jit_compile`, XLA compiles a search once per input shape: sub-batches
# are padded to 1, 2, 4 or a multiple of 8 rows and to a multiple of this many
# source tokens (or the source limit), so a server meets a few dozen shapes, not
# every (rows, length) pair.
JIT_SOURCE_LENGTH_STEP = 16


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """How a translator decodes: its settings as given, checked when made.

    Args:
        max_length: most generated tokens per row, and most target tokens
            scored by `score`. Defaults to min(128, model.max_length).
        max_source_length: int. Longest source in tokens, [START] and [END]
            included; longer ones are cut and flagged. Give the training
            run's `max_tokens`, as `export.export_run` does: the model has
            seen nothing longer. Defaults to min(128, model.max_length),
            128 being the training default.
        sub_batch_size: int. Rows decoded at once inside one call: the
            bound on a call's memory. Defaults to 64.
        in_flight: int. Searches run side by side within that bound, each
            over `sub_batch_size // in_flight` rows (a batch of fewer rows is
            split evenly among them; with the default 2 and no XLA, split by
            work: more of its short rows in one search, fewer of its long rows
            in the other, `sub_batches.in_sub_batches`). Defaults to 2.
        max_length_a, max_length_b: floats. A row also stops after
            `a * source_tokens + b` tokens (its last one then [END]), so one
            row that never ends does not hold its batch to `max_length`.
            Defaults to 1.5 and 10; `max_length_a=None` turns the cap off.
        beam_width: int. Width of beam search (`BeamSearch`). Defaults to 4.
        length_penalty_alpha: float. GNMT length penalty of beam search, or
            transformers' `length_penalty` exponent with `length_normalization`
            "transformers". Defaults to 0.6.
        length_normalization: "gnmt" or "transformers": how beam search ranks
            hypotheses and stops (`BeamSearch`). "transformers" is what an
            imported checkpoint's generation settings ask for
            (`pretrained.generation.decoding_settings`). Defaults to "gnmt".
        early_stopping: True, False or "never": transformers' stopping rule of
            beam search, used with `length_normalization` "transformers" only.
            Defaults to False.
        end_at_max_length: bool or None. A row that reaches `max_length` ends
            there with [END], whatever `max_length_a`, as transformers'
            `forced_eos_token_id` ends it (OPUS-MT's and mBART-50's checkpoints
            set it; NLLB-200's and M2M-100's do not: their rows end there as
            they are). Defaults to None: with `length_normalization`
            "transformers" only.
        stop_at_end: bool. False always decodes `max_length` tokens
            (benchmarks). Defaults to True.
        use_cache: bool. False re-runs the encoder and the whole decoder
            prefix at every step, the tutorial's way (benchmarks only).
            Defaults to True.
        jit_compile: bool. Compile greedy and beam search (encoder and
            decoding loop) with XLA: the same translations, faster at small
            batches on CPU once compiled (benchmarks/RESULTS.md, "Decoding
            speed"), but every new input shape compiles first (seconds; see
            `JIT_SOURCE_LENGTH_STEP`), and TF Serving runs it only with
            `--xla_cpu_compilation_enabled=true` (its XLA JIT is experimental).
            Sampling and target prefixes stay uncompiled. Defaults to False.
        freeze_weights: bool. Compute the decoder's fused weights
            (`Transformer.fused_step_weights`: self-attention's three projections
            as one matrix, the scaled cross-attention query, the tied output
            projection transposed) once, when the decoder is built, and keep
            them as variables, rather than once per search: what
            `export_translator` saves (`Translator.frozen()`; benchmarks/RESULTS.md,
            "Decoding speed"). Only those are copied; every other weight is
            still read from the model, so a frozen translator must not outlive
            a change to its model's weights (it would decode with old fused
            weights and new other ones). Leave it False (the default) for a
            translator used while its model trains. Without `use_cache` it has
            no effect.
        matmul_attention: bool. The searches' attention as batched matmuls from
            `search.MATMUL_ATTENTION_ROWS` rows on; False: broadcast products at every
            row count, for a model server on TensorFlow's oneDNN kernels, where they
            took less memory and answered more concurrent requests (`Search`).
            Defaults to True.
    """

    max_length: int | None = None
    max_source_length: int | None = None
    sub_batch_size: int = DEFAULT_SUB_BATCH_SIZE
    in_flight: int = DEFAULT_IN_FLIGHT
    max_length_a: float | None = DEFAULT_MAX_LENGTH_A
    max_length_b: float = DEFAULT_MAX_LENGTH_B
    beam_width: int = 4
    length_penalty_alpha: float = 0.6
    length_normalization: str = "gnmt"
    early_stopping: bool | str = False
    end_at_max_length: bool | None = None
    stop_at_end: bool = True
    use_cache: bool = True
    jit_compile: bool = False
    freeze_weights: bool = False
    matmul_attention: bool = True

    def __post_init__(self):
        for name in ("beam_width", "sub_batch_size", "in_flight"):
            if getattr(self, name) <= 0:
                raise ValueError(
                    f"`{name}` must be positive. Received: {name}={getattr(self, name)}"
                )
        LengthPolicy.check_cap(self.max_length_a, self.max_length_b)
        check_beam_settings(
            self.length_penalty_alpha, self.length_normalization, self.early_stopping
        )
        if self.jit_compile and not self.use_cache:
            raise ValueError(
                "`jit_compile` needs `use_cache`: XLA cannot compile the uncached "
                "path, whose input grows every step."
            )


@dataclasses.dataclass(frozen=True)
class LengthPolicy:
    """How many tokens each row may generate: at most `max_length`, and with `a` set
    at most `a * source_tokens + b` (fairseq's `max_len_a` / `max_len_b`), except that
    the limit counts the row's [END] (fairseq's does not): one row that never emits
    [END] costs its own few steps instead of holding the whole batch to `max_length`.
    With `end_at_max_length`, a row that reaches `max_length` ends with [END] there
    also without `a` (transformers' `forced_eos_token_id`). Without `stop_at_end`
    every row decodes `max_length` steps (benchmarks)."""

    max_length: int
    a: float | None = DEFAULT_MAX_LENGTH_A
    b: float = DEFAULT_MAX_LENGTH_B
    stop_at_end: bool = True
    end_at_max_length: bool = False

    @staticmethod
    def check_cap(a: float | None, b: float) -> None:
        """`a` finite and >= 0 (or None: no cap), `b` finite."""
        if a is not None and not (math.isfinite(a) and a >= 0):
            raise ValueError(f"`max_length_a` must be a finite number >= 0 or None. Received: {a}")
        if not math.isfinite(b):
            raise ValueError(f"`max_length_b` must be a finite number. Received: {b}")

    def source_relative(self, source_lengths):
        """`a * source_length + b` within [1, max_length] for int `(batch,)` real
        source tokens (`a` must be set)."""
        limits = tf.math.floor(self.a * tf.cast(source_lengths, tf.float32) + self.b)
        # Clamped before the cast: a float beyond int32's range casts to its minimum.
        return tf.cast(tf.clip_by_value(limits, 1.0, float(self.max_length)), tf.int32)

    def row_limits(self, ids, always: bool = False):
        """Most tokens each row of ragged source `ids` ([START] and [END] included) may
        generate, or None where no row has a limit below `max_length` (nor one at it,
        with `end_at_max_length`). With `always` (XLA's padded shapes need one) rows
        without a cap get `max_length + 1`, a limit they never reach."""
        uncapped = self.a is None and not self.end_at_max_length
        if not self.stop_at_end or (uncapped and not always):
            return None
        source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(ids, 0), tf.int32), axis=1) - 2
        if self.a is None:
            return tf.fill(tf.shape(source_lengths), self.max_length + int(uncapped))
        return self.source_relative(source_lengths)

    def most_steps(self, source_length: int) -> int:
        """Most tokens any row of a sub-batch `source_length` tokens wide may generate."""
        if self.a is None or not self.stop_at_end:
            return self.max_length
        with tf.init_scope():  # a number, also while a signature is traced
            # The longest real source fitting that width: without [START] and [END].
            return int(self.source_relative(tf.constant([source_length - 2])).numpy()[0])


class BatchDecoder(tf.Module):
    """Decodes batches of source ids with `model`, a bounded number of rows at a time.

    A call decodes `sub_batch_size` rows at a time, rows of similar source length
    together (`sub_batches.in_sub_batches`), so neither its memory nor the wait it
    imposes on other callers grows with its row count beyond one sub-batch of
    `max_source_length` tokens; between sub-batches it hands its inter-op thread
    back to the calls queued before it (`sub_batches.yield_thread`).

    Args:
        model: a built `Transformer`.
        options: `DecodingOptions`.
    """

    def __init__(self, model, options: DecodingOptions, name: str | None = "decoder"):
        super().__init__(name=name)
        positions = int(model.max_length)
        max_source_length = options.max_source_length
        if max_source_length is None:
            max_source_length = min(DEFAULT_MAX_SOURCE_LENGTH, positions)
        if not 2 <= max_source_length <= positions:
            raise ValueError(
                "`max_source_length` must be at least 2 ([START] and [END]) and at most the "
                f"model's max_length ({positions}). Received: max_source_length={max_source_length}"
            )
        self.options = options
        # The Keras model is kept out of the tracked object graph (its default save
        # signature would trace it with float inputs); its variables are tracked
        # instead, which is all the traced functions use.
        self._keras = types.SimpleNamespace(model=model)
        self.model_variables = [tf_variable(v) for v in model.variables]
        # Tracked, so that an export saves them beside the model's variables. The
        # uncached path re-runs the Keras layers and never reads them.
        self.fused_weights = (
            tf.nest.map_structure(
                lambda t: tf.Variable(t, trainable=False), model.fused_step_weights()
            )
            if options.freeze_weights and options.use_cache
            else None
        )
        self.max_source_length = int(max_source_length)
        self.max_length = decode_length(
            model, options.max_length or min(DEFAULT_MAX_LENGTH, positions)
        )
        self.lengths = LengthPolicy(
            self.max_length,
            None if options.max_length_a is None else float(options.max_length_a),
            float(options.max_length_b),
            bool(options.stop_at_end),
            end_at_max_length=(
                options.length_normalization == "transformers"
                if options.end_at_max_length is None
                else bool(options.end_at_max_length)
            ),
        )
        searches = dict(
            max_length=self.max_length,
            stop_at_end=options.stop_at_end,
            use_cache=options.use_cache,
            fixed_shapes=options.jit_compile,
            matmul_attention=options.matmul_attention,
        )
        self.greedy = GreedySearch(**searches)
        self.beam = BeamSearch(
            **searches,
            beam_width=int(options.beam_width),
            length_penalty_alpha=float(options.length_penalty_alpha),
            length_normalization=options.length_normalization,
            early_stopping=options.early_stopping,
        )

    @property
    def model(self):
        return self._keras.model

    def decode(
        self, ids, beam_width=None, num_hypotheses=None, prefix=None, forced_first=None
    ) -> DecodeResult:
        """Greedy search over ragged source `ids` (int64 `(batch, None)`), or beam search
        with `beam_width` (int or int32 scalar), each row's `num_hypotheses` best with a
        hypothesis axis after the rows when given; compiled by XLA with `jit_compile`,
        except with a `prefix` (ragged int64 target ids, one row each: XLA's searches
        take none). `forced_first`: optional int `(batch,)`, each row's forced first
        token, 0 for none (`Search`'s call)."""
        if beam_width is None:
            search = self.greedy
        else:
            search = self.beam.replace(beam_width=beam_width, num_hypotheses=num_hypotheses)
        if self.options.jit_compile and prefix is None:
            search = self._compiled(search)
        return self.decode_with(search, ids, prefix, num_hypotheses, forced_first)

    def decode_with(
        self, search, ids, prefix=None, num_hypotheses=None, forced_first=None
    ) -> DecodeResult:
        """`search` (a `Search`, or a `CompiledSearch`) over ragged source `ids`, in
        sub-batches (`sub_batches.in_sub_batches`), within the length policy's limits;
        `forced_first` as `decode`'s."""
        jit_compile = self.options.jit_compile
        return sub_batches.in_sub_batches(
            self.model,
            search,
            ids,
            int(self.options.sub_batch_size),
            int(self.options.in_flight),
            # XLA's compiled searches take at most `rows_per_search` rows.
            balance_lengths=not jit_compile,
            row_limits=self.lengths.row_limits(ids, always=jit_compile),
            fused_weights=self.fused_weights,
            prefix=prefix,
            num_hypotheses=num_hypotheses,
            forced_first=forced_first,
        )

    def score(self, context_ids, target_ids) -> scoring.ScoreResult:
        """Teacher-forced scores of ragged `target_ids` given ragged `context_ids`, in
        sub-batches (`scoring.score_targets`)."""
        return scoring.score_targets(
            self.model, context_ids, target_ids, int(self.options.sub_batch_size)
        )

    def _compiled(self, search: Search) -> sub_batches.CompiledSearch:
        """`search` compiled by XLA on padded shapes.

        Sources are padded to a multiple of `JIT_SOURCE_LENGTH_STEP` tokens, and each
        such length gets its own compiled search whose caches hold only the steps the
        length policy allows a source of that length (`LengthPolicy.most_steps`; XLA's
        caches have every slot from the start, so a 16-token source, capped at 31 steps
        by default, attends over 31 slots, not 128). Beam search compiles once per beam
        width too.
        """
        step, longest = JIT_SOURCE_LENGTH_STEP, self.max_source_length
        return sub_batches.CompiledSearch(
            search,
            step,
            longest,
            [self.lengths.most_steps(n) for n in sub_batches.padded_source_lengths(step, longest)],
            sub_batches.rows_per_search(self.options.sub_batch_size, self.options.in_flight),
        )


def tf_variable(variable):
    """The `tf.Variable` behind a Keras variable (the object a SavedModel tracks)."""
    return variable if isinstance(variable, tf.Variable) else variable.value
