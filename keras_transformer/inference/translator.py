"""Translator(tf.Module): strings in, strings out, with the tokenizers inside.

Its traced functions (`translate`, `translate_beam`; `translate_nbest` for n-best
lists, `translate_with_prefix` and `translate_beam_with_prefix` for a target
prefix; `score` for given translations) hold the whole pipeline in one graph:
normalization and subword tokenization (tensorflow-text), the source cut at the
source limit (and reported as cut), cached in-graph decoding over bounded
sub-batches, and detokenization. That is what `export.py` writes into a SavedModel.

The translator holds its searches as objects built from its settings
(`inference.sampling.GreedySearch`, `inference.beam.BeamSearch`; sampling's per
call) and runs them through the sub-batches it owns (`inference.sub_batches`:
the bound on rows decoded at once, and the padded shapes XLA compiles).

It stays one module because its pieces are methods of the one object a SavedModel tracks
(the seven traced functions, the row limits, the choice of XLA compilation for its
searches, its frozen fused weights and `frozen()`, the eager `__call__`), and they read
the same settings off it. The strings' cuts are `inputs.py`'s.
"""

from __future__ import annotations

import types
from typing import Any

import tensorflow as tf

from keras_transformer.constants import START_ID
from keras_transformer.inference import inputs, scoring, sub_batches
from keras_transformer.inference.beam import (
    BeamSearch,
    check_length_penalty,
    checked_num_hypotheses,
)
from keras_transformer.inference.sampling import GreedySearch, SamplingSearch
from keras_transformer.inference.search import (
    check_length_cap,
    decode_length,
    source_relative_limits,
)
from keras_transformer.layers import backend

TEXT_SPEC = tf.TensorSpec([None], tf.string, name="text")
BEAM_WIDTH_SPEC = tf.TensorSpec([], tf.int32, name="beam_width")
# A target prefix per row, as text (CTranslate2's `target_prefix`); "" for none.
PREFIX_SPEC = tf.TensorSpec([None], tf.string, name="prefix")
NUM_HYPOTHESES_SPEC = tf.TensorSpec([], tf.int32, name="num_hypotheses")

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


class Translator(tf.Module):
    """Translates batches of strings with a trained `Transformer`.

    Every input row gets an answer: empty or whitespace-only strings decode
    from an empty source (`[START] [END]`), undecodable bytes are replaced by
    U+FFFD, and sources longer than `max_source_length` tokens are cut there
    (their [END] kept) and flagged in the `source_truncated` output. A batch
    of zero rows gives zero rows.

    Bounded: a call decodes `sub_batch_size` rows at a time, rows of similar
    source length together (`sub_batches.in_sub_batches`), so neither its memory
    nor the wait it imposes on other callers grows with its row count or its
    longest row beyond one sub-batch of `max_source_length` tokens: between
    sub-batches a call hands its inter-op thread back to the calls queued
    before it (`sub_batches.yield_thread`), however few threads the server has.

    Args:
        model: a built `Transformer`.
        source_tokenizer, target_tokenizer: `Tokenizer`s of the training run.
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
        length_penalty_alpha: float. GNMT length penalty of beam search.
            Defaults to 0.6.
        stop_at_end: bool. False always decodes `max_length` tokens
            (benchmarks). Defaults to True.
        use_cache: bool. False re-runs the encoder and the whole decoder
            prefix at every step, the tutorial's way (benchmarks only).
            Defaults to True.
        jit_compile: bool. Compile greedy and beam search (encoder and
            decoding loop) with XLA: the same translations, 2-3.5x faster at
            batch 1 on CPU once compiled (benchmarks/RESULTS.md, "Decoding speed"), but every
            new input shape compiles first (seconds; see
            `JIT_SOURCE_LENGTH_STEP`), and TF Serving runs
            it only with `--xla_cpu_compilation_enabled=true` (its XLA JIT is
            experimental). Sampling stays uncompiled. Defaults to False.
        freeze_weights: bool. Compute the decoder's fused weights
            (`Transformer.fused_step_weights`: self-attention's three projections
            as one matrix, the scaled cross-attention query, the tied output
            projection transposed) once, here, and keep them as variables,
            rather than once per search: what `export_translator` saves
            (`frozen()`), about 1.1x at batch 1 (benchmarks/RESULTS.md, "Decoding speed").
            Only those are copied; every other weight is still read from the
            model, so a frozen translator must not outlive a change to its
            model's weights (it would decode with old fused weights and new
            other ones). Leave it False (the default) for a translator used
            while its model trains. Without `use_cache` it has no effect.
        name: str. The module's name. Defaults to "translator".

    Example:
    >>> translator = Translator(model, source_tokenizer, target_tokenizer)
    >>> translator(["este é um problema que temos que resolver."])["translation"]
    """

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        max_length: int | None = None,
        max_source_length: int | None = None,
        sub_batch_size: int = DEFAULT_SUB_BATCH_SIZE,
        in_flight: int = DEFAULT_IN_FLIGHT,
        max_length_a: float | None = DEFAULT_MAX_LENGTH_A,
        max_length_b: float = DEFAULT_MAX_LENGTH_B,
        beam_width: int = 4,
        length_penalty_alpha: float = 0.6,
        stop_at_end: bool = True,
        use_cache: bool = True,
        jit_compile: bool = False,
        freeze_weights: bool = False,
        name: str | None = "translator",
    ):
        # The arguments as given, for `frozen()` (taken before any other local exists).
        settings = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        super().__init__(name=name)
        if not backend.ON_TENSORFLOW:
            raise ValueError(
                "Translator decodes in TensorFlow graphs and runs on the TensorFlow backend "
                f"(KERAS_BACKEND=tensorflow); the Keras backend here is {backend.BACKEND!r}. "
                "A run trained on another backend translates and exports unchanged there."
            )
        if beam_width <= 0:
            raise ValueError(f"`beam_width` must be positive. Received: beam_width={beam_width}")
        if sub_batch_size <= 0:
            raise ValueError(
                f"`sub_batch_size` must be positive. Received: sub_batch_size={sub_batch_size}"
            )
        if in_flight <= 0:
            raise ValueError(f"`in_flight` must be positive. Received: in_flight={in_flight}")
        check_length_cap(max_length_a, max_length_b)
        check_length_penalty(length_penalty_alpha)
        if jit_compile and not use_cache:
            raise ValueError(
                "`jit_compile` needs `use_cache`: XLA cannot compile the uncached "
                "path, whose input grows every step."
            )
        positions = int(model.max_length)
        if max_source_length is None:
            max_source_length = min(DEFAULT_MAX_SOURCE_LENGTH, positions)
        if not 2 <= max_source_length <= positions:
            raise ValueError(
                "`max_source_length` must be at least 2 ([START] and [END]) and at most the "
                f"model's max_length ({positions}). Received: max_source_length={max_source_length}"
            )
        # The Keras model is kept out of the tracked object graph (its
        # default save signature would trace it with float inputs); its
        # variables are tracked instead, which is all the traced functions use.
        self._keras = types.SimpleNamespace(model=model, settings=settings)
        self.model_variables = [_tf_variable(v) for v in model.variables]
        # Tracked, so that an export saves them beside the model's variables. The
        # uncached path re-runs the Keras layers and never reads them.
        self.fused_weights = (
            tf.nest.map_structure(
                lambda t: tf.Variable(t, trainable=False), model.fused_step_weights()
            )
            if freeze_weights and use_cache
            else None
        )
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.max_source_length = int(max_source_length)
        self.sub_batch_size = int(sub_batch_size)
        self.in_flight = int(in_flight)
        self.max_length = decode_length(
            model, max_length or min(DEFAULT_MAX_LENGTH, int(model.max_length))
        )
        self.max_length_a = None if max_length_a is None else float(max_length_a)
        self.max_length_b = float(max_length_b)
        self.beam_width = int(beam_width)
        self.length_penalty_alpha = float(length_penalty_alpha)
        self.stop_at_end = bool(stop_at_end)
        self.use_cache = bool(use_cache)
        self.jit_compile = bool(jit_compile)
        # Eager sampling's traced functions, one per setting (`_sample`); kept out of
        # what tf.Module tracks, so that an export never saves them.
        object.__setattr__(self, "_sampling_functions", {})
        # The searches of `translate` and `translate_beam` (whose width each call sets).
        searches = dict(
            max_length=self.max_length,
            stop_at_end=self.stop_at_end,
            use_cache=self.use_cache,
            fixed_shapes=self.jit_compile,
        )
        self.greedy = GreedySearch(**searches)
        self.beam = BeamSearch(
            **searches, beam_width=self.beam_width, length_penalty_alpha=self.length_penalty_alpha
        )

    @property
    def model(self):
        return self._keras.model

    def frozen(self) -> Translator:
        """A new translator built with this one's arguments and `freeze_weights=True`:
        its fused weights are computed from the model's weights as they are now. What
        `export_translator` saves."""
        return type(self)(**{**self._keras.settings, "freeze_weights": True})

    # -- graph pieces --------------------------------------------------------

    def row_limits(self, ids):
        """Most tokens each row of ragged `ids` may generate (None without a limit to apply).

        With `jit_compile` there always is one: rows of padding only, added to reach a
        compiled shape, get limit 1 (`sub_batches.CompiledSearch`) and the others one
        they never reach."""
        if not self.stop_at_end:
            return None  # benchmarks decode exactly `max_length` steps
        if self.max_length_a is None and not self.jit_compile:
            return None
        # Real source tokens, without [START] and [END].
        source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(ids, 0), tf.int32), axis=1) - 2
        if self.max_length_a is None:
            return tf.fill(tf.shape(source_lengths), self.max_length + 1)  # never reached
        return source_relative_limits(
            source_lengths, self.max_length_a, self.max_length_b, self.max_length
        )

    def _decode(self, text, search, prefix=None, num_hypotheses=None):
        """`search` (a `Search`) over `text`, in sub-batches: `(ids, truncated, result,
        outputs)`, the source ids and cuts (`source_tokens`), the `DecodeResult` and,
        with `prefix` (target-side strings, one a row), `prefix_truncated`."""
        ids, truncated = inputs.source_tokens(self.source_tokenizer, text, self.max_source_length)
        outputs = {}
        if prefix is not None:
            rows = tf.debugging.assert_equal(
                tf.shape(prefix), tf.shape(text), message="text and prefix must have as many rows"
            )
            with tf.control_dependencies([rows]):
                prefix, outputs["prefix_truncated"] = inputs.target_tokens(
                    self.target_tokenizer, prefix, self.max_length
                )
        result = sub_batches.in_sub_batches(
            self.model,
            search,
            ids,
            self.sub_batch_size,
            self.in_flight,
            # XLA's compiled searches take at most `rows_per_search` rows.
            balance_lengths=not self.jit_compile,
            row_limits=self.row_limits(ids),
            fused_weights=self.fused_weights,
            prefix=prefix,
            num_hypotheses=num_hypotheses,
        )
        return ids, truncated, result, outputs

    def _translate(self, text, search, prefix=None) -> dict[str, tf.Tensor]:
        """Every output of `search` over `text` (`_decode`)."""
        ids, truncated, result, outputs = self._decode(text, search, prefix)
        ragged = tf.RaggedTensor.from_tensor(result.tokens, lengths=result.lengths)
        return outputs | {
            "translation": self.target_tokenizer.detokenize(ragged),
            "score": result.scores,
            "source_truncated": truncated,
            "tokens": result.tokens,
            "lengths": result.lengths,
            "context_ids": _padded(ids),
        }

    @tf.function(input_signature=[TEXT_SPEC])
    def translate(self, text):
        """Greedy translation: dict of translation, score (log-prob), source_truncated,
        tokens, lengths, context_ids."""
        return self._translate(text, self._compiled(self.greedy))

    @tf.function(input_signature=[TEXT_SPEC, BEAM_WIDTH_SPEC])
    def translate_beam(self, text, beam_width):
        """Beam-search translation with any `beam_width`; same outputs as `translate`."""
        search = self.beam.replace(beam_width=beam_width)
        return self._translate(text, self._compiled(search))

    # -- n-best lists and target prefixes --------------------------------------

    @tf.function(input_signature=[TEXT_SPEC, PREFIX_SPEC])
    def translate_with_prefix(self, text, prefix):
        """Greedy translation continuing each row's target `prefix` (text, "" for none):
        `translate`'s outputs, the translation starting with the prefix and the score
        the log-probability of all of it (prefix included), and `prefix_truncated`
        (the prefix was cut at `max_length - 1` tokens). Decoded without XLA, also
        with `jit_compile` (XLA's searches take no prefix)."""
        return self._translate(text, self.greedy, prefix)

    @tf.function(input_signature=[TEXT_SPEC, PREFIX_SPEC, BEAM_WIDTH_SPEC])
    def translate_beam_with_prefix(self, text, prefix, beam_width):
        """Beam-search translation continuing each row's target `prefix`; the outputs of
        `translate_with_prefix`."""
        return self._translate(text, self.beam.replace(beam_width=beam_width), prefix)

    @tf.function(input_signature=[TEXT_SPEC, BEAM_WIDTH_SPEC, NUM_HYPOTHESES_SPEC])
    def translate_nbest(self, text, beam_width, num_hypotheses):
        """Each row's `num_hypotheses` best translations by beam search, best first (an
        InvalidArgumentError unless 1 <= num_hypotheses <= beam_width).

        Returns a dict of translations (string `(batch, k)`), scores (float32
        `(batch, k)`, log-probabilities as `translate_beam`'s score; the first of
        each row is `translate_beam`'s translation and score), lengths (int32
        `(batch, k)`), source_truncated (bool `(batch,)`), tokens (int64
        `(batch, k, max_length)`) and context_ids. A row with fewer than k
        hypotheses (a row limit of one token) fills the rest with empty
        translations scored -inf.
        """
        k = checked_num_hypotheses(num_hypotheses, beam_width)
        search = self._compiled(self.beam.replace(beam_width=beam_width, num_hypotheses=k))
        ids, truncated, result, _ = self._decode(text, search, num_hypotheses=k)
        # One translation a hypothesis: rows x k rows to detokenize.
        ragged = tf.RaggedTensor.from_tensor(
            tf.reshape(result.tokens, [-1, self.max_length]),
            lengths=tf.reshape(result.lengths, [-1]),
        )
        return {
            "translations": tf.reshape(self.target_tokenizer.detokenize(ragged), [-1, k]),
            "scores": result.scores,
            "lengths": result.lengths,
            "source_truncated": truncated,
            "tokens": result.tokens,
            "context_ids": _padded(ids),
        }

    def _compiled(self, search):
        """`search` compiled by XLA on padded shapes if `jit_compile`, else `search`.

        Sources are padded to a multiple of `JIT_SOURCE_LENGTH_STEP` tokens, and each
        such length gets its own compiled search whose caches hold only the steps the
        source-relative cap allows a source of that length (`most_steps`; XLA's caches
        have every slot from the start, so a 16-token source, capped at 31 steps by
        default, attends over 31 slots, not 128). Beam search compiles once per beam
        width too.
        """
        if not self.jit_compile:
            return search
        step, longest = JIT_SOURCE_LENGTH_STEP, self.max_source_length
        lengths = sub_batches.padded_source_lengths(step, longest)
        return sub_batches.CompiledSearch(
            search,
            step,
            longest,
            [self.most_steps(length) for length in lengths],
            sub_batches.rows_per_search(self.sub_batch_size, self.in_flight),
        )

    def most_steps(self, source_length: int) -> int:
        """Most tokens any row of a sub-batch `source_length` wide may generate."""
        if self.max_length_a is None or not self.stop_at_end:
            return self.max_length
        with tf.init_scope():  # a number, also while a signature is traced
            limits = source_relative_limits(
                tf.constant([source_length - 2]),  # the longest real source fitting it
                self.max_length_a,
                self.max_length_b,
                self.max_length,
            )
            return int(limits.numpy()[0])

    @tf.function(input_signature=[])
    def serving_limits(self):
        """The bounds of this translator, readable from its SavedModel.

        max_source_length: longest source in tokens ([START], [END] included);
        sub_batch_size: rows decoded together; max_length: most generated tokens;
        beam_width: the width of the `beam_search` and `nbest` signatures.
        """
        return {
            "max_source_length": tf.constant(self.max_source_length),
            "sub_batch_size": tf.constant(self.sub_batch_size),
            "max_length": tf.constant(self.max_length),
            "beam_width": tf.constant(self.beam_width),
        }

    # -- scoring given translations ------------------------------------------

    @tf.function(input_signature=[scoring.SOURCE_SPEC, scoring.TARGET_SPEC])
    def score(self, source, target):
        """Teacher-forced scores of given translations `target` of `source` (`scoring.py`).

        Sources are cut as translation cuts them; targets are tokenized with the
        target tokenizer and cut at `max_length` tokens, [END] included (an empty
        target scores [END] alone). `source` and `target` must have as many rows.

        Returns:
            dict of score (float32 `(batch,)`: the log-probability of the target
            tokens and [END]), normalized_score (score / the GNMT length penalty
            with `length_penalty_alpha`: beam search's normalization),
            token_scores (float32 `(batch, tokens)`, 0-padded), length (int32
            `(batch,)`, tokens scored), source_truncated and target_truncated.
        """
        same_rows = tf.debugging.assert_equal(
            tf.size(source),
            tf.size(target),
            message="score: `source` and `target` must have as many rows",
        )
        with tf.control_dependencies([same_rows]):
            source, target = tf.identity(source), tf.identity(target)
        context_ids, source_truncated = inputs.source_tokens(
            self.source_tokenizer, source, self.max_source_length
        )
        target_ids, target_truncated = inputs.target_tokens(
            self.target_tokenizer, target, self.max_length
        )
        result = scoring.score_targets(self.model, context_ids, target_ids, self.sub_batch_size)
        return {
            "score": result.scores,
            "normalized_score": scoring.normalized_scores(result, self.length_penalty_alpha),
            "token_scores": result.token_scores,
            "length": result.lengths,
            "source_truncated": source_truncated,
            "target_truncated": target_truncated,
        }

    # -- eager convenience ---------------------------------------------------

    def __call__(
        self,
        texts,
        method: str = "greedy",
        beam_width: int | None = None,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        return_attention: bool = False,
        num_hypotheses: int | None = None,
        prefix=None,
    ) -> dict[str, Any]:
        """Translates `texts` (a string or a list of strings).

        Args:
            method: "greedy", "beam" or "sample".
            beam_width: beam width for "beam". Defaults to the translator's.
            temperature, top_k, top_p, seed: for "sample".
            return_attention: also return the last decoder layer's
                cross-attention weights `(batch, heads, target, source)`
                with the token strings, for `plotting` (not with an n-best list).
            num_hypotheses: int k, 1 <= k <= the beam width, with "beam": each
                row's k best translations (`translate_nbest`'s outputs: the
                keys "translations" and "scores", `(batch, k)`). Defaults to
                None: the best one.
            prefix: a target-side string per text ("" for none), or None: each
                translation starts with its row's prefix and continues from it
                (`translate_with_prefix`); its score counts the prefix too, and
                "prefix_truncated" says which were cut. Not with `num_hypotheses`.

        Returns:
            dict with "translation" (bytes strings), "score",
            "source_truncated", "tokens", "lengths", "context_ids"; with
            attention also "attention", "source_tokens" and "target_tokens"
            (ragged token strings).
        """
        if isinstance(texts, (str, bytes)):
            texts = [texts]
        text = tf.constant(list(texts), tf.string, shape=[len(texts)])
        width = self.beam_width if beam_width is None else beam_width
        if method == "beam" and width <= 0:
            raise ValueError(f"`beam_width` must be positive. Received: beam_width={width}")
        if prefix is not None:
            prefix = _prefix_rows(prefix, len(texts), num_hypotheses)
        if num_hypotheses is not None:
            if method != "beam" or not 1 <= num_hypotheses <= width:
                raise ValueError(
                    f"`num_hypotheses` needs method='beam' and must be between 1 and the beam "
                    f"width ({width}). Received: num_hypotheses={num_hypotheses}, "
                    f"method={method!r}"
                )
            if return_attention:
                raise ValueError(
                    "`return_attention` gives one translation's attention: it does not go "
                    "with `num_hypotheses`."
                )
            outputs = self.translate_nbest(
                text, tf.constant(width, tf.int32), tf.constant(num_hypotheses, tf.int32)
            )
        elif method == "greedy":
            outputs = (
                self.translate(text) if prefix is None else self.translate_with_prefix(text, prefix)
            )
        elif method == "beam":
            width = tf.constant(width, tf.int32)
            outputs = (
                self.translate_beam(text, width)
                if prefix is None
                else self.translate_beam_with_prefix(text, prefix, width)
            )
        elif method == "sample":
            outputs = self._sample(text, temperature, top_k, top_p, seed, prefix)
        else:
            raise ValueError(
                f"`method` must be 'greedy', 'beam' or 'sample'. Received: method={method!r}"
            )
        if return_attention:
            outputs.update(self.attention(outputs["context_ids"], outputs["tokens"]))
        return outputs

    def _sample(self, text, temperature, top_k, top_p, seed, prefix=None):
        # Traced once per setting and reused: a function traced anew each call would
        # keep another graph in the process every call.
        key = (temperature, top_k, top_p, seed, prefix is None)
        function = self._sampling_functions.get(key)
        if function is None:
            # Each sub-batch draws from its own stream of the seed (`SamplingSearch`).
            search = SamplingSearch(
                max_length=self.max_length,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                seed=seed,
            )
            if prefix is None:
                function = tf.function(
                    lambda text: self._translate(text, search), reduce_retracing=True
                )
            else:
                function = tf.function(
                    lambda text, prefix: self._translate(text, search, prefix),
                    reduce_retracing=True,
                )
            self._sampling_functions[key] = function
        return function(text) if prefix is None else function(text, prefix)

    def attention(self, context_ids, tokens) -> dict[str, Any]:
        """Cross-attention weights of the last decoder layer for decoded `tokens`.

        One teacher-forced pass over [START] + tokens (without the last one)
        reproduces the attention of every decoding step.
        """
        batch = tf.shape(tokens)[0]
        start = tf.fill([batch, 1], tf.constant(START_ID, tf.int64))
        target_in = tf.concat([start, tokens[:, :-1]], axis=1)
        _, scores = self.model((context_ids, target_in), return_attention_scores=True)
        source_tokens = self.source_tokenizer.lookup(
            tf.RaggedTensor.from_tensor(context_ids, padding=0)
        )
        target_tokens = self.target_tokenizer.lookup(tf.RaggedTensor.from_tensor(tokens, padding=0))
        return {
            "attention": scores[-1],
            "source_tokens": source_tokens,
            "target_tokens": target_tokens,
        }


def _prefix_rows(prefix, rows: int, num_hypotheses):
    """The eager call's `prefix` as a string tensor of `rows` rows (ValueError unless
    it has one a text, or with `num_hypotheses`)."""
    if isinstance(prefix, (str, bytes)):
        prefix = [prefix]
    prefix = list(prefix)
    if len(prefix) != rows or num_hypotheses is not None:
        raise ValueError(
            f"`prefix` must have one string per text ({rows}), and n-best lists take "
            f"none. Received: {len(prefix)} prefixes, num_hypotheses={num_hypotheses}"
        )
    return tf.constant(prefix, tf.string, shape=[rows])


def _padded(ids):
    """Ragged source ids -> 0-padded `(batch, length)`; a zero-row batch gets the two
    columns every row has."""
    dense = ids.to_tensor()
    return tf.reshape(dense, [-1, tf.maximum(tf.shape(dense)[1], 2)])


def _tf_variable(variable):
    """The `tf.Variable` behind a Keras variable (the object a SavedModel tracks)."""
    return (
        getattr(variable, "value", variable) if not isinstance(variable, tf.Variable) else variable
    )
