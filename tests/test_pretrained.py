"""Imported MarianMT checkpoints against transformers, on the tiny random checkpoints and
reference outputs of tests/data/marian/ (made by its make_fixtures.py with torch and
transformers; this file needs neither).

Tolerances: logits and log-probabilities within 1e-4 of transformers' (float32, other
kernels: at most 1.0e-5 seen on AVX-512). Greedy outputs are token-identical on every
row: the fixtures' greedy margins (best logit minus the runner-up, at every step a
search chose) are at least 1.1e-3 (joint_swish; 2e-2 for the others), 100 times the
float error. Beam search (width 4, no length normalization on both sides) is identical on at
least 90% of rows; `test_beam_4` prints why any other row differs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.constants import END_ID, PAD_ID, START_ID
from keras_transformer.inference.beam import BeamSearch
from keras_transformer.inference.sampling import GreedySearch
from keras_transformer.pretrained import load_marian
from keras_transformer.pretrained.marian_config import read_spec

FIXTURES = Path(__file__).parent / "data" / "marian"
SHAPES = ("joint_swish", "separate_gelu", "joint_relu")
ATOL = 1e-4


class Imported:
    """A fixture checkpoint loaded, its reference outputs, and id conversions."""

    def __init__(self, name: str):
        self.directory = FIXTURES / name
        self.reference = json.loads((self.directory / "reference.json").read_text())
        self.logits = np.load(self.directory / "logits.npz")
        self.marian = load_marian(self.directory)
        spec = read_spec(self.directory)
        self.source_order, self.target_order = spec.source.order, spec.target.order

    def to_marian(self, ids, side="target") -> list[int]:
        order = self.source_order if side == "source" else self.target_order
        return [int(order[i]) for i in ids]

    def source_ids(self) -> tf.RaggedTensor:
        return self.marian.source_tokenizer.tokenize(tf.constant(self.reference["sources"]))

    def target_ids(self) -> tf.RaggedTensor:
        return self.marian.target_tokenizer.tokenize(tf.constant(self.reference["targets"]))

    def log_probs(self, row: int, marian_ids: list[int]) -> list[float]:
        """The model's log-probability of each token of `marian_ids` after source `row`."""
        library_id = {int(m): j for j, m in enumerate(self.target_order) if j != START_ID}
        labels = [library_id[m] for m in marian_ids]
        context = self.source_ids()[row : row + 1].to_tensor()
        target_in = tf.constant([[START_ID, *labels[:-1]]])
        logits = self.marian.model((context, target_in))[0]
        log_probs = tf.nn.log_softmax(logits, axis=-1).numpy()
        return [float(log_probs[t, label]) for t, label in enumerate(labels)]

    def generated(self, result) -> list[list[int]]:
        """A search's rows as Marian ids, up to and with the end token."""
        rows = []
        for tokens, length in zip(result.tokens.numpy(), result.lengths.numpy()):
            rows.append(self.to_marian(tokens[:length]))
        return rows


@pytest.fixture(scope="module", params=SHAPES)
def imported(request) -> Imported:
    return Imported(request.param)


def test_token_ids_equal_marian_tokenizers(imported):
    """Sources (language codes, unknown characters, empty and spaced strings included)
    and targets get MarianTokenizer's ids, mapped; targets read back as its decode."""
    reference = imported.reference
    sources = imported.source_ids().to_list()
    for row, text, expected in zip(sources, reference["sources"], reference["source_ids"]):
        assert row[0] == START_ID and row[-1] == END_ID, text
        # The model reads the source without its [START] (`source_start=False`).
        assert imported.to_marian(row[1:], "source") == expected, text
    targets = imported.target_ids()
    for row, expected in zip(targets.to_list(), reference["target_ids"]):
        assert imported.to_marian(row[1:]) == expected
    decoded = imported.marian.target_tokenizer.detokenize(targets).numpy()
    assert [t.decode() for t in decoded] == reference["target_decoded"]


def test_logits_equal_transformers(imported):
    sources, targets = imported.source_ids(), imported.target_ids()
    for i in range(3):
        expected = imported.logits[f"logits_{i}"]  # (positions, Marian vocab)
        context = sources[i : i + 1].to_tensor()
        target_in = targets[i : i + 1].to_tensor()[:, :-1]
        logits = imported.marian.model((context, target_in)).numpy()[0]
        # Library id j holds Marian id order[j]; [PAD] and [START] are suppressed.
        kept = [j for j in range(logits.shape[1]) if j not in (PAD_ID, START_ID)]
        ours = logits[:, kept]
        theirs = expected[:, imported.target_order[kept]]
        np.testing.assert_allclose(ours, theirs, atol=ATOL, rtol=0)
        assert (logits[:, [PAD_ID, START_ID]] < -1e3).all()


def _search(imported, search):
    """`search` over the fixture's sources, capped as transformers' `generate` is: at
    `max_length` positions, the decoder's start included, the last one `</s>`
    (`forced_eos_token_id`), which a row limit gives."""
    context = imported.source_ids().to_tensor()
    steps = imported.reference["max_length"] - 1
    limits = tf.fill([tf.shape(context)[0]], steps)
    return search.replace(max_length=steps)(imported.marian.model, context, row_limits=limits)


def test_greedy_equals_generate(imported):
    result = _search(imported, GreedySearch())
    assert imported.generated(result) == imported.reference["greedy"]
    text = imported.marian.target_tokenizer.detokenize(
        tf.RaggedTensor.from_tensor(result.tokens, lengths=result.lengths)
    )
    assert [t.decode() for t in text.numpy()] == imported.reference["greedy_decoded"]


def test_beam_4_equals_generate_on_most_rows(imported):
    result = _search(imported, BeamSearch(beam_width=4, length_penalty_alpha=0.0))
    ours = imported.generated(result)
    expected = imported.reference["beam"]
    differ = [i for i, (a, b) in enumerate(zip(ours, expected)) if a != b]
    for i in differ:
        # Both hypotheses under both implementations' scores. Ours is the sum of the
        # log-probabilities of every token, [END] included; transformers' counts an
        # `</s>` it forced at the cap (`forced_eos_token_id`) as log-probability 0.
        both = {"ours": ours[i], "transformers'": expected[i]}
        scores = {name: imported.log_probs(i, ids) for name, ids in both.items()}
        cap = imported.reference["max_length"] - 1
        print(
            f"{imported.directory.name} row {i}: "
            + "; ".join(
                f"{name} {both[name]}: ours {sum(lp):.4f}, transformers' "
                f"{sum(lp[:-1]) if len(lp) == cap else sum(lp):.4f}"
                for name, lp in scores.items()
            )
        )
    assert len(differ) <= 0.1 * len(expected), differ
    same = [
        i for i in range(len(expected)) if i not in differ and len(expected[i]) < cap_of(imported)
    ]
    np.testing.assert_allclose(
        result.scores.numpy()[same],
        np.array(imported.reference["beam_scores"])[same],
        atol=ATOL * imported.reference["max_length"],
    )


def cap_of(imported) -> int:
    return imported.reference["max_length"] - 1


def test_teacher_forced_log_probabilities(imported):
    """The model's log-probabilities of each given pair (the `score` signature's sums,
    tested through the export below) are transformers' (pad suppressed, as generate)."""
    sources, targets = imported.source_ids(), imported.target_ids()
    for i, expected in enumerate(imported.reference["teacher_forced_log_probs"]):
        context = sources[i : i + 1].to_tensor()
        target = targets[i : i + 1].to_tensor()
        logits = imported.marian.model((context, target[:, :-1]))
        log_probs = tf.nn.log_softmax(logits[0], axis=-1).numpy()
        labels = target.numpy()[0, 1:]
        ours = log_probs[np.arange(len(labels)), labels]
        np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=0)
