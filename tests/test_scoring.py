"""Scoring given translations: teacher-forced log-probabilities, by the translator and
through the export's `score` signature, for every row a client may send."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.constants import END_ID, START_ID
from keras_transformer.inference import inputs, loaded_export, scoring
from keras_transformer.inference.translator import Translator

PAIRS = [
    ("three one four", "3 1 4"),
    ("nine five", "9 5"),
    ("two six", "6 2"),  # a wrong translation: a lower score
    ("seven", ""),  # an empty target: [END] alone
    ("", "  \t "),  # whitespace only on both sides
    (b"one \xff\xfe two", b"1 \xff 2"),  # not UTF-8
]
# Row name -> (source, target) as a client sends them, source cut, target cut.
HOSTILE = {
    "empty": (b"", b"", False, False),
    "whitespace": (b"  \t \n ", b" \t ", False, False),
    "long source": (b" ".join([b"eight"] * 300), b"8", True, False),
    "long target": (b"eight", b" ".join([b"8"] * 300), False, True),
    "1 MB": (b"one two " * (1 << 17), b"1 2 " * (1 << 18), True, True),
    "undecodable": (b"one \xff\xfe two \xc3", b"1 \xff\xfe 2 \xc3", False, False),
}


def _encoded(text):
    return text if isinstance(text, bytes) else text.encode()


def reference_scores(tiny, pairs):
    """Per pair, alone (no padding): log_softmax of the model's logits over
    `[START] target`, summed at `target [END]`; and the number of those tokens."""
    scores, lengths = [], []
    for source, target in pairs:
        context = tiny.source_tokenizer.tokenize(tf.constant([_encoded(source)])).to_tensor()
        ids = tiny.target_tokenizer.tokenize(tf.constant([_encoded(target)])).to_tensor()
        logits = tiny.model((context, ids[:, :-1]), training=False)
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32)).numpy()[0]
        following = ids.numpy()[0, 1:]
        scores.append(sum(log_probs[i, token] for i, token in enumerate(following)))
        lengths.append(len(following))
    return np.array(scores), np.array(lengths)


def _columns(pairs):
    sources = tf.constant([_encoded(s) for s, *_ in pairs], tf.string, shape=[len(pairs)])
    targets = tf.constant([_encoded(t) for _, t, *_ in pairs], tf.string, shape=[len(pairs)])
    return sources, targets


@pytest.fixture(scope="module")
def translator(tiny_translator):
    return tiny_translator


def test_the_cuts_of_sources_and_target_side_text(tiny_translation_model):
    """What every signature reads first (`inputs.py`): a source keeps [START] and [END]
    within `max_source_length` tokens; target-side text (a prefix, a target to score)
    keeps its words within `max_tokens - 1`, room for [END]; a row over either limit is
    flagged, and so is a row cut at its byte limit even where its tokens fit."""
    tiny = tiny_translation_model
    padded = b" " * 10_000 + b"one"  # cut unread at 64 bytes a token of the limit
    sources = tf.constant([b"one two three", b"", b"one two three four", padded])
    ids, cut = inputs.source_tokens(tiny.source_tokenizer, sources, max_source_length=5)
    words = tiny.source_tokenizer.tokenize(tf.constant(["one two three"]))[0].numpy().tolist()
    assert ids.to_list()[0] == words and words[0] == START_ID and words[-1] == END_ID
    assert ids.to_list()[1] == [START_ID, END_ID] == ids.to_list()[3]
    assert ids.to_list()[2] == words  # the fourth word is cut
    assert cut.numpy().tolist() == [False, False, True, True]

    targets = tf.constant([b"3 1 4", b"1 2 3 4 5", b"", b" " * 10_000 + b"7"])
    ids, cut = inputs.target_tokens(tiny.target_tokenizer, targets, max_tokens=4)
    digits = tiny.target_tokenizer.tokenize(tf.constant(["1 2 3"]))[0, 1:-1].numpy().tolist()
    assert (
        ids.to_list()[0]
        == tiny.target_tokenizer.tokenize(tf.constant(["3 1 4"]))[0, 1:-1].numpy().tolist()
    )
    assert ids.to_list()[1:] == [digits, [], []]
    assert cut.numpy().tolist() == [False, True, False, True]


def test_scores_are_the_models_log_probabilities(translator, tiny_translation_model):
    expected, lengths = reference_scores(tiny_translation_model, PAIRS)
    scored = translator.score(*_columns(PAIRS))
    np.testing.assert_allclose(scored["score"].numpy(), expected, atol=1e-4)
    np.testing.assert_array_equal(scored["length"].numpy(), lengths)
    assert lengths.tolist() == [4, 3, 3, 1, 1, 4]  # the bad byte is one unknown token
    token_scores = scored["token_scores"].numpy()
    assert token_scores.shape == (len(PAIRS), 4)
    np.testing.assert_allclose(token_scores.sum(axis=1), expected, atol=1e-4)
    assert np.all(token_scores[np.arange(4)[None, :] >= lengths[:, None]] == 0)
    # The right translation scores above the wrong one of the same length.
    assert scored["score"].numpy()[0] > scored["score"].numpy()[2]
    penalty = ((5.0 + lengths) / 6.0) ** translator.options.length_penalty_alpha
    np.testing.assert_allclose(scored["normalized_score"].numpy(), expected / penalty, atol=1e-4)
    assert not scored["source_truncated"].numpy().any()
    assert not scored["target_truncated"].numpy().any()


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_scoring_a_searchs_tokens_gives_back_its_score(translator, tiny_translation_model, method):
    """The same quantity as the searches' `score`: scored on the ids they produced
    (detokenized text need not tokenize back to them), [END] scored and counted."""
    tiny = tiny_translation_model
    outputs = translator(tiny.sentences, method=method, beam_width=3)
    tokens, lengths = outputs["tokens"].numpy(), outputs["lengths"].numpy()
    ended = tokens[np.arange(len(lengths)), lengths - 1] == 3  # rows that emitted [END]
    assert ended.sum() >= 12
    context = tf.RaggedTensor.from_tensor(outputs["context_ids"][ended], padding=0)
    words = tf.RaggedTensor.from_tensor(tokens[ended], lengths=lengths[ended] - 1)
    result = scoring.score_targets(tiny.model, context, words, sub_batch_size=4)
    np.testing.assert_allclose(result.scores.numpy(), outputs["score"].numpy()[ended], atol=1e-4)
    np.testing.assert_array_equal(result.lengths.numpy(), lengths[ended])


def test_hostile_rows_get_finite_scores_and_their_flags(translator):
    rows = list(HOSTILE.values())
    scored = translator.score(*_columns(rows))
    scores = scored["score"].numpy()
    assert np.all(np.isfinite(scores)) and np.all(scores <= 0)
    assert np.all(np.isfinite(scored["normalized_score"].numpy()))
    assert scored["source_truncated"].numpy().tolist() == [row[2] for row in rows]
    assert scored["target_truncated"].numpy().tolist() == [row[3] for row in rows]
    # A cut target scores `max_length` tokens, its [END] after the cut included.
    lengths = dict(zip(HOSTILE, scored["length"].numpy().tolist(), strict=True))
    assert lengths["long target"] == lengths["1 MB"] == translator.max_length == 16
    assert lengths["empty"] == lengths["whitespace"] == 1
    # Each row reads as it does alone.
    for i, row in enumerate(rows):
        alone = translator.score(*_columns([row]))
        np.testing.assert_allclose(alone["score"].numpy(), scores[i : i + 1], atol=1e-4)


def test_zero_rows_and_rows_that_do_not_pair(translator):
    empty = translator.score(tf.constant([], tf.string), tf.constant([], tf.string))
    assert {key: value.shape.as_list() for key, value in empty.items()} == {
        "score": [0],
        "normalized_score": [0],
        "token_scores": [0, 0],
        "length": [0],
        "source_truncated": [0],
        "target_truncated": [0],
    }
    with pytest.raises(tf.errors.InvalidArgumentError, match="must have as many rows"):
        translator.score(tf.constant(["one", "two"]), tf.constant(["1"]))


def test_one_sub_batch_or_many_give_the_same_scores(translator, tiny_translation_model):
    tiny = tiny_translation_model
    small = Translator(
        tiny.model, tiny.source_tokenizer, tiny.target_tokenizer, max_length=16, sub_batch_size=2
    )
    rows = [*PAIRS, *((s, t) for s, t, *_ in HOSTILE.values()), *PAIRS[:3]]
    columns = _columns(rows)
    one, many = translator.score(*columns), small.score(*columns)
    for key in ("score", "normalized_score", "token_scores"):
        np.testing.assert_allclose(one[key].numpy(), many[key].numpy(), atol=1e-5, err_msg=key)
    for key in ("length", "source_truncated", "target_truncated"):
        np.testing.assert_array_equal(one[key].numpy(), many[key].numpy(), err_msg=key)


# Runs in a fresh interpreter where `import keras_transformer` fails: the `score`
# signature's answers to the requests on stdin (pairs of latin-1 encoded lists).
SERVE_SCORES = r"""
import json, sys
sys.modules["keras_transformer"] = None
import tensorflow as tf
import tensorflow_text  # noqa: F401

loaded = tf.saved_model.load(sys.argv[1])
signature = loaded.signatures["score"]
outputs = signature.structured_outputs
answers = [{
    "inputs": sorted(signature.structured_input_signature[1]),
    "outputs": {k: [v.dtype.name, v.shape.as_list()] for k, v in outputs.items()},
}]
for sources, targets in json.load(sys.stdin):
    def column(texts):
        return tf.constant([t.encode("latin-1") for t in texts], tf.string, shape=[len(texts)])
    served = signature(source=column(sources), target=column(targets))
    answers.append({key: value.numpy().tolist() for key, value in served.items()})
json.dump(answers, sys.stdout)
"""


@pytest.fixture(scope="module")
def exported(tiny_export):
    """The session's export of the tiny model (conftest.py); it scores as `translator`
    does, whatever the sub-batches (test_one_sub_batch_or_many_give_the_same_scores)."""
    return tiny_export.path


def test_the_export_scores_in_a_fresh_process_without_the_library(translator, exported):
    rows = [*PAIRS, *((s, t) for s, t, *_ in HOSTILE.values())]
    sent = [[_encoded(text).decode("latin-1") for text in column] for column in zip(*rows)]
    run = subprocess.run(
        [sys.executable, "-c", SERVE_SCORES, str(exported)],
        input=json.dumps([sent, [[], []]]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    signature, served, none = json.loads(run.stdout)
    assert signature == {
        "inputs": ["source", "target"],
        "outputs": {
            "score": ["float32", [None]],
            "normalized_score": ["float32", [None]],
            "token_scores": ["float32", [None, None]],
            "length": ["int32", [None]],
            "source_truncated": ["bool", [None]],
            "target_truncated": ["bool", [None]],
        },
    }
    expected = translator.score(*_columns(rows))
    for key in ("score", "normalized_score", "token_scores"):
        np.testing.assert_allclose(served[key], expected[key].numpy(), atol=1e-4, err_msg=key)
    for key in ("length", "source_truncated", "target_truncated"):
        assert served[key] == expected[key].numpy().tolist(), key
    assert np.all(np.array(served["score"]) <= 0)
    assert none["score"] == [] and none["token_scores"] == []


def test_the_export_scores_are_the_models_log_probabilities(exported, tiny_translation_model):
    reference, _ = reference_scores(tiny_translation_model, PAIRS)
    loaded = loaded_export.load_translator(exported)
    sources, targets = _columns(PAIRS)
    scored = loaded_export.score_pairs(loaded, sources.numpy().tolist(), targets.numpy().tolist())
    np.testing.assert_allclose(scored["score"], reference, atol=1e-4)
