"""Translator(tf.Module): strings in, strings out, with the tokenizers inside.

Its traced functions (`translate`, `translate_beam`; `translate_nbest` for n-best
lists, `translate_with_prefix` and `translate_beam_with_prefix` for a target
prefix; `score` for given translations) hold the whole pipeline in one graph:
normalization and subword tokenization (tensorflow-text), the source cut at the
source limit (and reported as cut), the decoding of the token ids and
detokenization. That is what `export.py` writes into a SavedModel.

A translator is its two tokenizers, a `BatchDecoder` (`batch_decoding.py`: the
searches, the length policy, the bounded sub-batches and XLA's shapes) and the
traced functions between them; the strings' cuts are `inputs.py`'s. It stays one
module because its traced functions are methods of the one object a SavedModel tracks.
`MultilingualTranslator` (a multilingual checkpoint's: the same functions, each taking
the languages) stays beside it: it only re-declares those functions' signatures over
the base class's graph pieces, and the base class refuses multilingual tokenizers by
naming it.

The package's `tf.function`s are traced without AutoGraph (`autograph=False`): their
code branches and loops with `tf.cond` and `tf.while_loop` already, and AutoGraph
rewrote each of the package's own functions they call (it leaves TensorFlow's and
Keras' alone): an export of the tiny test model in a fresh process took 75 s with it
and 23 s without.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from keras_transformer.constants import START_ID
from keras_transformer.inference import inputs, scoring
from keras_transformer.inference.batch_decoding import BatchDecoder, DecodingOptions
from keras_transformer.inference.beam import checked_num_hypotheses
from keras_transformer.inference.sampling import SamplingSearch
from keras_transformer.layers import backend

TEXT_SPEC = tf.TensorSpec([None], tf.string, name="text")
BEAM_WIDTH_SPEC = tf.TensorSpec([], tf.int32, name="beam_width")
# A target prefix per row, as text (CTranslate2's `target_prefix`); "" for none.
PREFIX_SPEC = tf.TensorSpec([None], tf.string, name="prefix")
NUM_HYPOTHESES_SPEC = tf.TensorSpec([], tf.int32, name="num_hypotheses")
# A multilingual checkpoint's languages: a code per row, or one for every row.
SOURCE_LANGUAGE_SPEC = tf.TensorSpec([None], tf.string, name="source_language")
TARGET_LANGUAGE_SPEC = tf.TensorSpec([None], tf.string, name="target_language")
LANGUAGE_SPECS = (SOURCE_LANGUAGE_SPEC, TARGET_LANGUAGE_SPEC)


class Translator(tf.Module):
    """Translates batches of strings with a trained `Transformer`.

    Every input row gets an answer: empty or whitespace-only strings decode
    from an empty source (`[START] [END]`), undecodable bytes are replaced by
    U+FFFD, and sources longer than `max_source_length` tokens are cut there
    (their [END] kept) and flagged in the `source_truncated` output. A batch
    of zero rows gives zero rows.

    Bounded: a call decodes a sub-batch of rows at a time (`BatchDecoder`), so
    its memory and the wait it imposes on other callers stay those of one
    sub-batch however many rows it holds.

    Args:
        model: a built `Transformer`.
        source_tokenizer, target_tokenizer: `Tokenizer`s of the training run.
        options: `DecodingOptions`; the keyword arguments below override its fields.
        name: str. The module's name. Defaults to "translator".
        **settings: `DecodingOptions` fields (max_length, max_source_length,
            sub_batch_size, in_flight, max_length_a, max_length_b, beam_width,
            length_penalty_alpha, length_normalization, early_stopping,
            stop_at_end, use_cache, jit_compile, freeze_weights, matmul_attention).

    Example:
    >>> translator = Translator(model, source_tokenizer, target_tokenizer)
    >>> translator(["este é um problema que temos que resolver."])["translation"]
    """

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        options: DecodingOptions | None = None,
        name: str | None = "translator",
        **settings,
    ):
        super().__init__(name=name)
        if not backend.ON_TENSORFLOW:
            raise ValueError(
                "Translator decodes in TensorFlow graphs and runs on the TensorFlow backend "
                f"(KERAS_BACKEND=tensorflow); the Keras backend here is {backend.BACKEND!r}. "
                "A run trained on another backend translates and exports unchanged there."
            )
        if hasattr(source_tokenizer, "tokenize_in") and not isinstance(
            self, MultilingualTranslator
        ):
            raise ValueError(
                "These are a multilingual checkpoint's tokenizers: translate with a "
                "MultilingualTranslator (translator_class(source_tokenizer)), whose calls take "
                "the languages."
            )
        unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(DecodingOptions)})
        if unknown:
            raise TypeError(f"Translator got unknown decoding settings: {', '.join(unknown)}")
        options = dataclasses.replace(options or DecodingOptions(), **settings)
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.decoder = BatchDecoder(model, options)
        # Eager sampling's traced functions, one per setting (`_sample`); kept out of
        # what tf.Module tracks, so that an export never saves them.
        object.__setattr__(self, "_sampling_functions", {})

    @property
    def model(self):
        return self.decoder.model

    @property
    def options(self) -> DecodingOptions:
        return self.decoder.options

    @property
    def max_length(self) -> int:
        """Most generated tokens per row (the options' `max_length`, resolved)."""
        return self.decoder.max_length

    @property
    def max_source_length(self) -> int:
        """Longest source in tokens (the options' `max_source_length`, resolved)."""
        return self.decoder.max_source_length

    def frozen(self, model=None) -> Translator:
        """A new translator with this one's options and `freeze_weights=True`, on `model`
        (this one's when None; a bfloat16 export gives its bfloat16 copy): its fused
        weights are computed from the model's weights as they are now. What
        `export_translator` saves."""
        return type(self)(
            self.model if model is None else model,
            self.source_tokenizer,
            self.target_tokenizer,
            self.options,
            name=self.name,
            freeze_weights=True,
        )

    # -- graph pieces --------------------------------------------------------

    def _tokenizers(self, rows, languages=None):
        """(source, target) tokenizers for `rows` rows: the translator's, or with
        `languages` (source and target codes, one a row or one for all) tokenizers that
        frame each row with its language (`MultilingualTokenizer.tokenize_in`)."""
        if languages is None:
            return self.source_tokenizer, self.target_tokenizer
        source, target = (
            _rows_of(codes, rows, spec.name) for codes, spec in zip(languages, LANGUAGE_SPECS)
        )
        return (
            _InLanguage(self.source_tokenizer, source),
            _InLanguage(self.target_tokenizer, target),
        )

    def _decode(self, text, prefix=None, sampling=None, languages=None, **search):
        """The decoder's search (`BatchDecoder.decode`'s `search` arguments), or the
        `SamplingSearch` `sampling`, over `text`: `(ids, truncated, result, outputs)`,
        the source ids and cuts (`source_tokens`), the `DecodeResult` and, with `prefix`
        (target-side strings, one a row), `prefix_truncated`. With `languages` (a
        multilingual checkpoint's source and target codes) the source is read in its
        language and the target's code is its first token."""
        source_tokenizer, target_tokenizer = self._tokenizers(tf.shape(text)[0], languages)
        ids, truncated = inputs.source_tokens(source_tokenizer, text, self.max_source_length)
        outputs = {}
        # The target's language code, forced as the first token, log-probability 0
        # (transformers' `forced_bos_token_id`).
        forced_first = None if languages is None else target_tokenizer.languages
        if prefix is not None:
            rows = tf.debugging.assert_equal(
                tf.shape(prefix), tf.shape(text), message="text and prefix must have as many rows"
            )
            with tf.control_dependencies([rows]):
                prefix, outputs["prefix_truncated"] = inputs.target_tokens(
                    target_tokenizer, prefix, self.max_length
                )
            if forced_first is not None:
                prefix = prefix[:, 1:]  # after the language code, which is forced
        if sampling is None:
            result = self.decoder.decode(ids, prefix=prefix, forced_first=forced_first, **search)
        else:
            result = self.decoder.decode_with(sampling, ids, prefix, forced_first=forced_first)
        return ids, truncated, result, outputs

    def _translate(self, text, prefix=None, **search) -> dict[str, tf.Tensor]:
        """Every output of a search over `text` (`_decode`)."""
        ids, truncated, result, outputs = self._decode(text, prefix, **search)
        ragged = tf.RaggedTensor.from_tensor(result.tokens, lengths=result.lengths)
        return outputs | {
            "translation": self.target_tokenizer.detokenize(ragged),
            "score": result.scores,
            "source_truncated": truncated,
            "tokens": result.tokens,
            "lengths": result.lengths,
            "context_ids": _padded(ids),
        }

    @tf.function(input_signature=[TEXT_SPEC], autograph=False)
    def translate(self, text):
        """Greedy translation: dict of translation, score (log-prob), source_truncated,
        tokens, lengths, context_ids."""
        return self._translate(text)

    @tf.function(input_signature=[TEXT_SPEC, BEAM_WIDTH_SPEC], autograph=False)
    def translate_beam(self, text, beam_width):
        """Beam-search translation with any `beam_width`; same outputs as `translate`."""
        return self._translate(text, beam_width=beam_width)

    # -- n-best lists and target prefixes --------------------------------------

    @tf.function(input_signature=[TEXT_SPEC, PREFIX_SPEC], autograph=False)
    def translate_with_prefix(self, text, prefix):
        """Greedy translation continuing each row's target `prefix` (text, "" for none):
        `translate`'s outputs, the translation starting with the prefix and the score
        the log-probability of all of it (prefix included), and `prefix_truncated`
        (the prefix was cut at `max_length - 1` tokens). Decoded without XLA, also
        with `jit_compile` (XLA's searches take no prefix)."""
        return self._translate(text, prefix)

    @tf.function(input_signature=[TEXT_SPEC, PREFIX_SPEC, BEAM_WIDTH_SPEC], autograph=False)
    def translate_beam_with_prefix(self, text, prefix, beam_width):
        """Beam-search translation continuing each row's target `prefix`; the outputs of
        `translate_with_prefix`."""
        return self._translate(text, prefix, beam_width=beam_width)

    @tf.function(input_signature=[TEXT_SPEC, BEAM_WIDTH_SPEC, NUM_HYPOTHESES_SPEC], autograph=False)
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
        return self._nbest(text, beam_width, num_hypotheses)

    def _nbest(self, text, beam_width, num_hypotheses, languages=None):
        k = checked_num_hypotheses(num_hypotheses, beam_width)
        ids, truncated, result, _ = self._decode(
            text, beam_width=beam_width, num_hypotheses=k, languages=languages
        )
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

    @tf.function(input_signature=[], autograph=False)
    def serving_limits(self):
        """The bounds of this translator, readable from its SavedModel.

        max_source_length: longest source in tokens ([START], [END] included);
        sub_batch_size: rows decoded together; max_length: most generated tokens;
        beam_width: the width of the `beam_search` and `nbest` signatures.
        """
        return {
            "max_source_length": tf.constant(self.max_source_length),
            "sub_batch_size": tf.constant(self.options.sub_batch_size),
            "max_length": tf.constant(self.max_length),
            "beam_width": tf.constant(self.options.beam_width),
        }

    # -- scoring given translations ------------------------------------------

    @tf.function(input_signature=[scoring.SOURCE_SPEC, scoring.TARGET_SPEC], autograph=False)
    def score(self, source, target):
        """Teacher-forced scores of given translations `target` of `source` (`scoring.py`).

        Sources are cut as translation cuts them; targets are tokenized with the
        target tokenizer and cut at `max_length` tokens, [END] included (an empty
        target scores [END] alone). `source` and `target` must have as many rows.

        Returns:
            dict of score (float32 `(batch,)`: the log-probability of the target
            tokens and [END]), normalized_score (score / the length penalty
            with `length_penalty_alpha`: beam search's normalization),
            token_scores (float32 `(batch, tokens)`, 0-padded), length (int32
            `(batch,)`, tokens scored), source_truncated and target_truncated.
        """
        return self._score(source, target)

    def _score(self, source, target, languages=None):
        same_rows = tf.debugging.assert_equal(
            tf.size(source),
            tf.size(target),
            message="score: `source` and `target` must have as many rows",
        )
        with tf.control_dependencies([same_rows]):
            source, target = tf.identity(source), tf.identity(target)
        source_tokenizer, target_tokenizer = self._tokenizers(tf.shape(source)[0], languages)
        context_ids, source_truncated = inputs.source_tokens(
            source_tokenizer, source, self.max_source_length
        )
        target_ids, target_truncated = inputs.target_tokens(
            target_tokenizer, target, self.max_length
        )
        result = self.decoder.score(context_ids, target_ids)
        return {
            "score": result.scores,
            "normalized_score": scoring.normalized_scores(
                result, self.options.length_penalty_alpha, self.options.length_normalization
            ),
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
        source_language=None,
        target_language=None,
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
            source_language, target_language: a multilingual checkpoint's language
                codes (`MultilingualTranslator`: both needed), one for every text or
                one a text. Defaults to None.

        Returns:
            dict with "translation" (bytes strings), "score",
            "source_truncated", "tokens", "lengths", "context_ids"; with
            attention also "attention", "source_tokens" and "target_tokens"
            (ragged token strings).
        """
        if isinstance(texts, (str, bytes)):
            texts = [texts]
        text = tf.constant(list(texts), tf.string, shape=[len(texts)])
        languages = self._language_arguments(source_language, target_language)
        width = self.options.beam_width if beam_width is None else beam_width
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
                text,
                beam_width=tf.constant(width, tf.int32),
                num_hypotheses=tf.constant(num_hypotheses, tf.int32),
                **languages,
            )
        elif method == "greedy":
            outputs = (
                self.translate(text, **languages)
                if prefix is None
                else self.translate_with_prefix(text, prefix=prefix, **languages)
            )
        elif method == "beam":
            width = tf.constant(width, tf.int32)
            outputs = (
                self.translate_beam(text, beam_width=width, **languages)
                if prefix is None
                else self.translate_beam_with_prefix(
                    text, prefix=prefix, beam_width=width, **languages
                )
            )
        elif method == "sample":
            outputs = self._sample(text, temperature, top_k, top_p, seed, prefix, languages)
        else:
            raise ValueError(
                f"`method` must be 'greedy', 'beam' or 'sample'. Received: method={method!r}"
            )
        if return_attention:
            outputs.update(self.attention(outputs["context_ids"], outputs["tokens"]))
        return outputs

    def _language_arguments(self, source_language, target_language) -> dict:
        """The eager call's languages as the traced functions' arguments: {} for a
        single-pair translator (which refuses them), both for a multilingual one."""
        given = source_language is not None or target_language is not None
        if not isinstance(self, MultilingualTranslator):
            if given:
                raise ValueError(
                    "source_language and target_language are a multilingual checkpoint's; "
                    "this translator translates one language pair."
                )
            return {}
        if source_language is None or target_language is None:
            raise ValueError(
                "A multilingual translator needs source_language and target_language "
                f"(codes such as {', '.join(sorted(self.source_tokenizer.languages)[:3])})."
            )
        for codes in (source_language, target_language):
            for code in [codes] if isinstance(codes, (str, bytes)) else codes:
                code = code.decode() if isinstance(code, bytes) else code
                if code not in self.source_tokenizer.languages:
                    raise ValueError(self.source_tokenizer.unknown_language_message(code))
        return {
            name: tf.constant([code] if isinstance(code, (str, bytes)) else list(code), tf.string)
            for name, code in (
                ("source_language", source_language),
                ("target_language", target_language),
            )
        }

    def _sample(self, text, temperature, top_k, top_p, seed, prefix=None, languages=None):
        # Traced once per setting (and once more with a prefix) and reused: a function
        # traced anew each call would keep another graph in the process every call.
        key = (temperature, top_k, top_p, seed)
        function = self._sampling_functions.get(key)
        if function is None:
            # Each sub-batch draws from its own stream of the seed (`SamplingSearch`).
            search = SamplingSearch(
                max_length=self.max_length,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                seed=seed,
                matmul_attention=self.options.matmul_attention,
            )
            function = tf.function(
                lambda text, prefix=None, languages=None: self._translate(
                    text, prefix, sampling=search, languages=languages
                ),
                reduce_retracing=True,
                autograph=False,
            )
            self._sampling_functions[key] = function
        codes = None
        if languages:
            codes = (languages["source_language"], languages["target_language"])
        return function(text, prefix, codes)

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


class MultilingualTranslator(Translator):
    """A `Translator` of a multilingual checkpoint (NLLB-200, M2M-100, mBART-50): every
    traced function also takes `source_language` and `target_language`, string
    `(rows,)` codes, or `(1,)` for every row. The source is read in its language
    (`[code] words </s>`), and the target's code is forced as the first token, as
    transformers' `forced_bos_token_id` does; `score` scores the target after its code,
    as transformers' labels hold them. An unknown code fails the call with an
    InvalidArgument error naming it. Its tokenizers are `MultilingualTokenizer`s;
    `__call__` needs both languages.
    """

    @tf.function(input_signature=[TEXT_SPEC, *LANGUAGE_SPECS], autograph=False)
    def translate(self, text, source_language, target_language):
        return self._translate(text, languages=(source_language, target_language))

    @tf.function(input_signature=[TEXT_SPEC, *LANGUAGE_SPECS, BEAM_WIDTH_SPEC], autograph=False)
    def translate_beam(self, text, source_language, target_language, beam_width):
        languages = (source_language, target_language)
        return self._translate(text, beam_width=beam_width, languages=languages)

    @tf.function(input_signature=[TEXT_SPEC, *LANGUAGE_SPECS, PREFIX_SPEC], autograph=False)
    def translate_with_prefix(self, text, source_language, target_language, prefix):
        return self._translate(text, prefix, languages=(source_language, target_language))

    @tf.function(
        input_signature=[TEXT_SPEC, *LANGUAGE_SPECS, PREFIX_SPEC, BEAM_WIDTH_SPEC],
        autograph=False,
    )
    def translate_beam_with_prefix(
        self, text, source_language, target_language, prefix, beam_width
    ):
        languages = (source_language, target_language)
        return self._translate(text, prefix, beam_width=beam_width, languages=languages)

    @tf.function(
        input_signature=[TEXT_SPEC, *LANGUAGE_SPECS, BEAM_WIDTH_SPEC, NUM_HYPOTHESES_SPEC],
        autograph=False,
    )
    def translate_nbest(self, text, source_language, target_language, beam_width, num_hypotheses):
        languages = (source_language, target_language)
        return self._nbest(text, beam_width, num_hypotheses, languages)

    @tf.function(
        input_signature=[scoring.SOURCE_SPEC, scoring.TARGET_SPEC, *LANGUAGE_SPECS],
        autograph=False,
    )
    def score(self, source, target, source_language, target_language):
        return self._score(source, target, (source_language, target_language))

    @tf.function(input_signature=[], autograph=False)
    def languages(self):
        """Every language code the checkpoint knows, sorted (string `(codes,)`): readable
        from its SavedModel, so that a client checks codes before it sends them."""
        return tf.constant(sorted(self.source_tokenizer.languages), tf.string)


def translator_class(source_tokenizer) -> type[Translator]:
    """`MultilingualTranslator` for a multilingual checkpoint's tokenizer, else `Translator`."""
    return MultilingualTranslator if hasattr(source_tokenizer, "tokenize_in") else Translator


class _InLanguage:
    """A multilingual tokenizer framing each row with its language: what the translator's
    graph pieces (`inputs.py`) call as any other tokenizer."""

    def __init__(self, tokenizer, codes):
        self._tokenizer = tokenizer
        self._codes = codes
        self.languages = tokenizer.language_ids(codes)

    def tokenize(self, strings):
        return self._tokenizer.tokenize_in(strings, self._codes)


def _rows_of(codes, rows, name: str):
    """`codes` `(1,)` or `(rows,)` as `(rows,)`; any other count fails the call naming `name`."""
    count = tf.size(codes)
    check = tf.debugging.Assert(
        tf.logical_or(tf.equal(count, 1), tf.equal(count, rows)),
        [f"{name} must hold one language code, or one per row; it holds", count],
    )
    with tf.control_dependencies([check]):
        return tf.broadcast_to(codes, [rows])


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
