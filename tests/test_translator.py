"""Translator: strings in, strings out, every row answered."""

import dataclasses
import gc
import weakref

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.constants import END_ID
from keras_transformer.inference import sampling
from keras_transformer.inference.batch_decoding import DEFAULT_MAX_SOURCE_LENGTH
from keras_transformer.inference.translator import Translator
from tests.helpers import SEARCH_SCORE_ATOL, tiny_transformer

BAD_INPUTS = [
    "",
    "   \t ",
    " ".join(["seven"] * 200),  # far beyond the model's max_length of 24
    b"one \xff\xfe two",  # not UTF-8
    "três ☃ nine",  # out of vocabulary
]


@pytest.fixture(scope="module")
def translator(tiny_translator):
    return tiny_translator


def _expected(sentence):
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    return " ".join(str(words.index(w)) for w in sentence.split())


def test_translates_the_task(translator, tiny_translation_model):
    sentences = tiny_translation_model.sentences
    outputs = translator(sentences)
    translations = [t.decode() for t in outputs["translation"].numpy()]
    correct = sum(t == _expected(s) for s, t in zip(sentences, translations, strict=True))
    assert correct >= 0.75 * len(sentences), translations
    beam = translator(sentences, method="beam", beam_width=3)
    assert sum(
        t.decode() == _expected(s)
        for s, t in zip(sentences, beam["translation"].numpy(), strict=True)
    ) >= 0.75 * len(sentences)


def test_matches_the_search_on_token_ids(translator, tiny_translation_model):
    tiny = tiny_translation_model
    outputs = translator(tiny.sentences)
    ids = tiny.source_tokenizer.tokenize(tf.constant(tiny.sentences)).to_tensor()
    result = sampling.greedy_search(tiny.model, ids, 16)
    np.testing.assert_array_equal(outputs["tokens"].numpy(), result.tokens.numpy())
    np.testing.assert_allclose(outputs["score"].numpy(), result.scores.numpy(), atol=1e-5)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_every_bad_row_gets_an_answer_and_spoils_no_other(translator, method):
    good = ["three one four", "two seven"]
    alone = translator(good, method=method)
    mixed = translator(BAD_INPUTS[:2] + good[:1] + BAD_INPUTS[2:] + good[1:], method=method)
    translations = mixed["translation"].numpy()
    scores = mixed["score"].numpy()
    assert translations.shape == scores.shape == (len(BAD_INPUTS) + 2,)
    assert np.all(np.isfinite(scores)) and np.all(scores <= 0)
    # The good rows read the same beside bad rows as on their own.
    assert translations[2] == alone["translation"].numpy()[0]
    assert translations[-1] == alone["translation"].numpy()[1]
    np.testing.assert_allclose(scores[[2, -1]], alone["score"].numpy(), atol=1e-4)
    # The overlong source was cut to the model's max_length, [END] kept.
    context = mixed["context_ids"].numpy()
    assert context.shape[1] == translator.max_source_length
    assert context[3, -1] == END_ID


def test_zero_rows_and_many_rows(translator):
    empty = translator.translate(tf.constant([], tf.string))
    assert empty["translation"].shape == (0,) and empty["score"].shape == (0,)
    many = translator.translate(tf.constant(["one two", "", "nine"] * 171)[:512])
    assert many["translation"].shape == (512,)
    # Each row reads as it does in a request of three.
    few = translator.translate(tf.constant(["one two", "", "nine"]))["translation"].numpy()
    np.testing.assert_array_equal(many["translation"].numpy(), np.tile(few, 171)[:512])


def test_attention_for_plotting(translator):
    outputs = translator(["three one four", "five"], return_attention=True)
    attention = outputs["attention"].numpy()
    heads = translator.model.num_heads
    assert attention.shape == (2, heads, 16, outputs["context_ids"].shape[1])
    np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-5)
    # The short source's padding gets no attention.
    assert np.all(attention[1, :, :, 3:] == 0.0)
    assert outputs["target_tokens"][0].numpy().tolist() == [b"3", b"1", b"4", b"[END]"]


def test_sampling_and_bad_arguments(translator):
    first = translator(["three one four"], method="sample", temperature=0.5, seed=1)
    again = translator(["three one four"], method="sample", temperature=0.5, seed=1)
    assert first["translation"].numpy() == again["translation"].numpy()
    with pytest.raises(ValueError, match="method"):
        translator(["one"], method="nucleus")
    with pytest.raises(ValueError, match="beam_width"):
        translator(["one"], method="beam", beam_width=0)


def test_source_relative_cap_reaches_every_search(tiny_translation_model):
    tiny = tiny_translation_model
    # a=0, b=2: every row stops after two tokens whatever its source.
    capped = Translator(
        tiny.model, tiny.source_tokenizer, tiny.target_tokenizer, max_length_a=0, max_length_b=2
    )
    for method in ("greedy", "beam", "sample"):
        lengths = capped(tiny.sentences, method=method, seed=1)["lengths"].numpy()
        assert lengths.max() <= 2, method
    # The default cap leaves these short sentences alone.
    default = Translator(tiny.model, tiny.source_tokenizer, tiny.target_tokenizer)
    uncapped = Translator(
        tiny.model, tiny.source_tokenizer, tiny.target_tokenizer, max_length_a=None
    )
    np.testing.assert_array_equal(
        default(tiny.sentences)["tokens"], uncapped(tiny.sentences)["tokens"]
    )


def test_a_translator_s_traced_graphs_go_with_it(tiny_translation_model):
    """A process that builds translator after translator (a server that reloads its
    model, a test suite) keeps none of their traced graphs: nothing global holds them."""
    tiny = tiny_translation_model
    translator = Translator(tiny.model, tiny.source_tokenizer, tiny.target_tokenizer)
    graphs = [
        weakref.ref(search.get_concrete_function().graph)
        for search in (translator.translate, translator.translate_beam)
    ]
    del translator
    gc.collect()
    assert [graph() for graph in graphs] == [None, None]


@pytest.mark.parametrize("tied", [True, False])
def test_frozen_fused_weights_are_what_every_search_reads(tiny_translation_model, tied):
    """A frozen translator (what an export saves) holds the decoder's fused weights as
    variables, computed from its model when it is built, and translates exactly as the
    live one, which computes them per search. Every search reads each kind of them: a
    change to one kind changes what each search says. A live translator (the default)
    follows its model, and `frozen()` always takes the model's weights as they are now."""
    tiny = tiny_translation_model
    model = tiny_transformer(
        vocab_size=tiny.target_tokenizer.vocab_size,
        num_layers=2,
        share_embeddings=tied,
        tie_embeddings=tied,
    )
    live = Translator(model, tiny.source_tokenizer, tiny.target_tokenizer, max_length=8)
    frozen = live.frozen()
    assert live.decoder.fused_weights is None
    assert frozen.options == dataclasses.replace(live.options, freeze_weights=True)

    def assert_holds(translator, expected):
        tf.nest.assert_same_structure(translator.decoder.fused_weights, expected)
        for variable, value in zip(
            tf.nest.flatten(translator.decoder.fused_weights),
            tf.nest.flatten(expected),
            strict=True,
        ):
            np.testing.assert_array_equal(variable.numpy(), value.numpy())

    assert_holds(frozen, model.fused_step_weights())
    methods = ("greedy", "beam", "sample")

    def scores(translator):
        return {m: translator(tiny.sentences, method=m, seed=3)["score"].numpy() for m in methods}

    reference = {m: live(tiny.sentences, method=m, seed=3) for m in methods}
    for method in methods:
        same = frozen(tiny.sentences, method=method, seed=3)
        for key in ("tokens", "score"):
            np.testing.assert_array_equal(
                same[key].numpy(), reference[method][key].numpy(), err_msg=method
            )

    layers = frozen.decoder.fused_weights.decoder
    kinds = {
        "query, key and value": [layer.query_key_value.kernel for layer in layers],
        "cross-attention query": [layer.cross_query.kernel for layer in layers],
    }
    if tied:
        kinds["tied projection"] = [frozen.decoder.fused_weights.projection]
    assert bool(tf.nest.flatten(frozen.decoder.fused_weights.projection)) == tied
    for kind, variables in kinds.items():
        kept = [v.numpy() for v in variables]
        for variable in variables:
            variable.assign(variable * 2.0 + 0.3)
        changed = scores(frozen)
        for method in methods:
            assert not np.array_equal(changed[method], reference[method]["score"].numpy()), (
                kind,
                method,
            )
        for variable, value in zip(variables, kept, strict=True):
            variable.assign(value)

    # Part of the fused self-attention kernel, and read at every step (a query is not, at
    # the first: attention over one position).
    value = model.decoder.dec_layers[0].causal_self_attention.mha.value_dense.kernel
    value.assign(value * 3.0 + 0.5)
    fresh = Translator(model, tiny.source_tokenizer, tiny.target_tokenizer, max_length=8)
    np.testing.assert_array_equal(scores(live)["greedy"], scores(fresh)["greedy"])
    assert not np.array_equal(scores(live)["greedy"], reference["greedy"]["score"].numpy())
    assert_holds(frozen.frozen(), model.fused_step_weights())


def test_sub_batches_and_xla_give_the_translations_of_one_batch(tiny_translation_model):
    """Sub-batches two in flight, and the searches compiled by XLA on padded shapes,
    translate as one batch decoded alone does, by greedy and by beam search. Each
    translator serves both searches: XLA's compiled code stays in the process until it
    ends."""
    tiny = tiny_translation_model
    texts = tiny.sentences + BAD_INPUTS + tiny.sentences[::-1]
    translators = {}

    def run(method, **settings):
        key = tuple(sorted(settings.items()))
        if key not in translators:
            translators[key] = Translator(
                tiny.model, tiny.source_tokenizer, tiny.target_tokenizer, max_length=16, **settings
            )
        return translators[key](texts, method=method, beam_width=3)

    # A tight source-relative cap for the compiled searches, and for their reference.
    cap = {"max_length_a": 0.5, "max_length_b": 2}
    for method in ("greedy", "beam"):
        whole = run(method, sub_batch_size=1000, in_flight=1, **cap)
        uncapped = run(method, sub_batch_size=1000, in_flight=1, max_length_a=None)
        # The translator's settings reach its sub-batches (one at a time and two in
        # flight against one batch, by each search: test_decoding.py), rows ending at
        # [END] rather than at a cap.
        parts = run(method, sub_batch_size=5, in_flight=2, max_length_a=None)
        for key in ("translation", "tokens", "lengths", "source_truncated", "context_ids"):
            np.testing.assert_array_equal(
                parts[key].numpy(), uncapped[key].numpy(), err_msg=f"{key} {method}"
            )
        np.testing.assert_allclose(
            parts["score"].numpy(), uncapped["score"].numpy(), atol=SEARCH_SCORE_ATOL
        )
        # Compiled, in sub-batches two in flight: XLA's caches hold only the steps a
        # padded source length allows (9 for 16 tokens: 0.5 * 14 + 2), and the
        # translations stay the same.
        compiled = run(method, sub_batch_size=6, in_flight=2, jit_compile=True, **cap)
        for key in ("translation", "lengths", "source_truncated"):
            np.testing.assert_array_equal(compiled[key].numpy(), whole[key].numpy(), err_msg=key)
        np.testing.assert_array_equal(compiled["tokens"].numpy(), whole["tokens"].numpy())
        np.testing.assert_allclose(
            compiled["score"].numpy(), whole["score"].numpy(), atol=SEARCH_SCORE_ATOL
        )
        # No source-relative cap: rows added to reach a compiled shape still end at once.
        compiled = run(method, jit_compile=True, max_length_a=None)
        np.testing.assert_array_equal(compiled["tokens"].numpy(), uncapped["tokens"].numpy())
    translator = Translator(
        tiny.model, tiny.source_tokenizer, tiny.target_tokenizer, max_length=16, **cap
    )
    assert [translator.decoder.lengths.most_steps(n) for n in (16, 24)] == [9, 13]


def test_overlong_sources_are_cut_at_the_limit_and_flagged(tiny_translation_model):
    tiny = tiny_translation_model
    translator = Translator(
        tiny.model, tiny.source_tokenizer, tiny.target_tokenizer, max_source_length=8
    )
    six, seven = "one two three four five six", "one two three four five six seven"
    # 1 MB: cut at 8 * 64 bytes before it is tokenized, and flagged.
    huge = "nine " * 200_000
    # Few tokens but many bytes: cut at the byte limit, and flagged all the same.
    spaced = "one" + " " * 1000 + "two"
    outputs = translator([six, seven, huge, spaced, ""])
    assert outputs["source_truncated"].numpy().tolist() == [False, True, True, True, False]
    # [START], six words, [END]: the longest source the model sees.
    assert outputs["context_ids"].shape[1] == 8
    translations = outputs["translation"].numpy()
    # The cut source is the six-word one, token for token: the same translation. (Not
    # compared with "1 2 3 4 5 6": the tiny model trained on other CPU kernels, oneDNN
    # off under AVX2, misreads this longest source.)
    assert translations[0] == translations[1] and translations[0]
    assert translations[2] == translator(["nine " * 6])["translation"].numpy()[0]
    assert translations[3] == translator(["one"])["translation"].numpy()[0]


def test_source_limit_defaults_and_bad_arguments(tiny_translation_model):
    tiny = tiny_translation_model
    tokenizers = (tiny.source_tokenizer, tiny.target_tokenizer)
    # The tiny model has 24 positions: the default limit is the smaller of 128 and that.
    assert Translator(tiny.model, *tokenizers).max_source_length == 24
    # A model with 2048 positions is cut at 128 tokens, not 2048.
    wide = tiny_transformer(vocab_size=tiny.source_tokenizer.vocab_size, max_length=2048)
    translator = Translator(wide, *tokenizers, max_length=4)
    assert translator.max_source_length == DEFAULT_MAX_SOURCE_LENGTH == 128
    outputs = translator([" ".join(["seven"] * 3000)])
    assert outputs["context_ids"].shape == (1, 128) and outputs["source_truncated"].numpy()[0]
    limits = {k: int(v) for k, v in translator.serving_limits().items()}
    expected = {"max_source_length": 128, "sub_batch_size": 64, "max_length": 4, "beam_width": 4}
    assert limits == expected
    for kwargs in ({"max_source_length": 25}, {"max_source_length": 1}):
        with pytest.raises(ValueError, match="max_source_length"):
            Translator(tiny.model, *tokenizers, **kwargs)
    with pytest.raises(ValueError, match="sub_batch_size"):
        Translator(tiny.model, *tokenizers, sub_batch_size=0)
    with pytest.raises(ValueError, match="in_flight"):
        Translator(tiny.model, *tokenizers, in_flight=0)
    for kwargs in ({"max_length_a": -1.0}, {"max_length_a": float("inf")}):
        with pytest.raises(ValueError, match="max_length_a"):
            Translator(tiny.model, *tokenizers, **kwargs)
    with pytest.raises(ValueError, match="max_length_b"):
        Translator(tiny.model, *tokenizers, max_length_b=float("nan"))
    with pytest.raises(ValueError, match="length_penalty_alpha"):
        Translator(tiny.model, *tokenizers, length_penalty_alpha=-0.2)
    with pytest.raises(ValueError, match="use_cache"):
        Translator(tiny.model, *tokenizers, jit_compile=True, use_cache=False)


def test_nbest_lists_start_with_the_beam_s_translation(translator):
    """Each row's k best translations, best first: the first is beam search's, its
    score too; scores are log-probabilities (the beam's score), and bad rows are
    answered as the beam answers them."""
    texts = ["three one four", "two seven", *BAD_INPUTS]
    best = translator(texts, method="beam", beam_width=3)
    nbest = translator(texts, method="beam", beam_width=3, num_hypotheses=3)
    assert nbest["translations"].shape == nbest["scores"].shape == (len(texts), 3)
    assert nbest["translations"].numpy()[:, 0].tolist() == best["translation"].numpy().tolist()
    # Another computation than the beam's (more hypotheses kept per step): its scores
    # round differently (2.4e-7 apart on AVX2 kernels).
    np.testing.assert_allclose(
        nbest["scores"].numpy()[:, 0], best["score"].numpy(), atol=SEARCH_SCORE_ATOL
    )
    np.testing.assert_array_equal(nbest["source_truncated"], best["source_truncated"])
    assert np.all(np.isfinite(nbest["scores"].numpy())) and np.all(nbest["scores"].numpy() <= 0)
    empty = translator.translate_nbest(tf.constant([], tf.string), 3, 2)
    assert empty["translations"].shape == (0, 2) and empty["scores"].shape == (0, 2)
    for k in (0, 4):
        with pytest.raises(ValueError, match="num_hypotheses"):
            translator(["one"], method="beam", beam_width=3, num_hypotheses=k)
        with pytest.raises(tf.errors.InvalidArgumentError, match="num_hypotheses must be"):
            translator.translate_nbest(tf.constant(["one"]), 3, k)
    with pytest.raises(ValueError, match="num_hypotheses"):
        translator(["one"], num_hypotheses=1)  # greedy
    with pytest.raises(ValueError, match="return_attention"):
        translator(["one"], method="beam", num_hypotheses=2, return_attention=True)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_a_target_prefix_starts_each_translation(translator, method):
    """The translation starts with its row's prefix (target-side text) and continues
    from it; rows with an empty prefix read as without one; a prefix past the steps
    is cut and flagged; bad rows and bad prefixes are answered."""
    texts = ["three one four", "two seven", "nine", *BAD_INPUTS]
    prefixes = ["3 9", "", "5", "1", "", " ".join(["4"] * 40), b"\xff 2", "7 ☃"]
    plain = translator(texts, method=method)
    given = translator(texts, method=method, prefix=prefixes)
    translations = [t.decode() for t in given["translation"].numpy()]
    assert translations[0].startswith("3 9") and translations[2].startswith("5")
    assert translations[1] == plain["translation"].numpy()[1].decode()
    assert given["score"].numpy()[1] == plain["score"].numpy()[1]
    assert given["prefix_truncated"].numpy().tolist() == [i == 5 for i in range(len(texts))]
    assert translations[5] == " ".join(["4"] * (translator.max_length - 1))
    tokens = given["tokens"].numpy()
    assert (
        tokens[0, :2].tolist()
        == translator.target_tokenizer.tokenize(["3 9"])[0, 1:-1].numpy().tolist()
    )
    assert np.all(np.isfinite(given["score"].numpy())) and np.all(given["score"].numpy() <= 0)
    # Empty prefixes throughout: the translations without one.
    none = translator(texts, method=method, prefix=[""] * len(texts))
    assert none["translation"].numpy().tolist() == plain["translation"].numpy().tolist()
    np.testing.assert_array_equal(none["score"].numpy(), plain["score"].numpy())
    with pytest.raises(ValueError, match="prefix"):
        translator(texts, method=method, prefix=prefixes[:2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="as many rows"):
        translator.translate_with_prefix(tf.constant(["one", "two"]), tf.constant(["1"]))
    empty = translator.translate_with_prefix(tf.constant([], tf.string), tf.constant([], tf.string))
    assert empty["translation"].shape == (0,) and empty["prefix_truncated"].shape == (0,)
