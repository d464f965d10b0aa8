"""The SavedModel as a server runs it: hostile rows, huge requests, bounded memory.

Each test loads the export in a fresh interpreter that imports only tensorflow
and tensorflow_text, as the TF Serving model server would run it.

The hostile rows: those tested since the first export (an empty string,
whitespace only, a source over the limit, undecodable bytes, out-of-vocabulary
characters, a request of zero rows, bad rows among good ones, 64 rows in one
request: test_export.py) and a 1 MB string, control characters, right-to-left
and combining characters, and 10,000 rows in one request. The hostile rows and the
zero-row request go through the n-best and prefix signatures too (each row its own
prefix, so the prefixes are as hostile as the rows).
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import serving_load
from benchmarks.serving_load import kernel_bounds, long_row_cost
from keras_transformer.inference import export
from keras_transformer.inference.translator import Translator
from tests.helpers import tiny_transformer

NORMAL = ["three one four", "nine five", "two six", "seven"]
# Row name -> the bytes a client sends, and whether the source is cut.
HOSTILE = {
    "empty": (b"", False),
    "whitespace": (b"  \t \n ", False),
    "300 words": (" ".join(["eight"] * 300).encode(), True),
    "undecodable": (b"one \xff\xfe two \xc3", False),
    "out of vocabulary": ("três ☃ nine 🎂".encode(), False),
    "1 MB": (b"one two " * (1 << 17), True),
    "control characters": (b"one\x00two\x07\x1b[31mthree\x7f\x08\x0c\r\x85four", False),
    "right to left": ("مرحبا שלום \u202eevil\u202c five".encode(), False),
    "combining characters": ("e\u0301\u0301\u0301 n\u0303 Z\u0334\u0321a\u0338l".encode(), False),
}

# Runs in a fresh interpreter where `import keras_transformer` fails; reads the
# requests on stdin (each a list of latin-1 encoded bytes and whether to ask every
# signature), prints the answers: serving_default's, and for a request that asks every
# signature also those of the n-best signature (2 hypotheses) and of the prefix
# signatures, each row's text its own prefix (hostile prefixes too).
SERVE = r"""
import json, sys
sys.modules["keras_transformer"] = None
import tensorflow as tf
import tensorflow_text  # noqa: F401

loaded = tf.saved_model.load(sys.argv[1])
answers = []
for texts, every_signature in json.load(sys.stdin):
    text = tf.constant([t.encode("latin-1") for t in texts], tf.string, shape=[len(texts)])
    served = loaded.signatures["serving_default"](text=text)
    answers.append({
        "translation": [t.decode("utf-8") for t in served["translation"].numpy()],
        "score": served["score"].numpy().tolist(),
        "source_truncated": served["source_truncated"].numpy().tolist(),
        "outputs": sorted(served),
    })
    if not every_signature:
        continue
    nbest = loaded.signatures["nbest"](text=text, num_hypotheses=tf.constant(2))
    answers[-1]["nbest"] = {
        "translation": [[t.decode("utf-8") for t in row] for row in nbest["translations"].numpy()],
        "score": nbest["scores"].numpy().tolist(),
        "source_truncated": nbest["source_truncated"].numpy().tolist(),
    }
    for name in ("greedy_with_prefix", "beam_search_with_prefix"):
        served = loaded.signatures[name](text=text, prefix=text)
        answers[-1][name] = {
            "translation": [t.decode("utf-8") for t in served["translation"].numpy()],
            "score": served["score"].numpy().tolist(),
            "source_truncated": served["source_truncated"].numpy().tolist(),
            "prefix_truncated": served["prefix_truncated"].numpy().tolist(),
        }
json.dump(answers, sys.stdout)
"""


def _serve(path, requests: list[tuple[list[bytes], bool]]) -> list[dict]:
    """`SERVE`'s answers to `requests` (rows, and whether to ask every signature)."""
    run = subprocess.run(
        [sys.executable, "-c", SERVE, str(path)],
        input=json.dumps(
            [([t.decode("latin-1") for t in texts], every) for texts, every in requests]
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def exported(tiny_export):
    """The session's export of the tiny model (conftest.py: sub-batches of 16 rows)."""
    return tiny_export.path


def _assert_answered(answer: dict, rows: int):
    assert len(answer["translation"]) == len(answer["score"]) == rows
    assert len(answer["source_truncated"]) == rows
    scores = np.array(answer["score"])
    assert np.all(np.isfinite(scores)) and np.all(scores <= 0)
    for name in ("nbest", "greedy_with_prefix", "beam_search_with_prefix"):
        if name in answer:
            assert answer[name]["source_truncated"] == answer["source_truncated"], name
            _assert_answered(answer[name], rows)
    if "nbest" in answer:
        assert all(len(row) == 2 for row in answer["nbest"]["translation"])
    for name in ("greedy_with_prefix", "beam_search_with_prefix"):
        if name in answer:
            assert len(answer[name]["prefix_truncated"]) == rows


NORMAL_ROWS = [t.encode() for t in NORMAL]
HOSTILE_ROWS = [row for row, _ in HOSTILE.values()]
# 10,000 rows: the normal ones, and every tenth a hostile one under 10,000 bytes.
SHORT_HOSTILE_ROWS = [row for row in HOSTILE_ROWS if len(row) < 10_000]
TEN_THOUSAND_ROWS = [
    NORMAL_ROWS[i % 4] if i % 10 else SHORT_HOSTILE_ROWS[(i // 10) % len(SHORT_HOSTILE_ROWS)]
    for i in range(10_000)
]


@pytest.fixture(scope="module")
def served(exported) -> dict:
    """The answers to every request of this file's tests, by name, from one fresh process
    (its start, TensorFlow's import and the export's load paid once): the normal rows,
    zero rows, each hostile row alone and all of them in one request, asking every
    signature; the short rows and the 10,000 rows, and two rows of which one is cut,
    asking serving_default."""
    requests = {
        "normal": (NORMAL_ROWS, True),
        "none": ([], True),
        **{("alone", name): ([row], True) for name, row in zip(HOSTILE, HOSTILE_ROWS, strict=True)},
        "mixed": (NORMAL_ROWS[:2] + HOSTILE_ROWS + NORMAL_ROWS[2:], True),
        "few": (NORMAL_ROWS + SHORT_HOSTILE_ROWS, False),
        "many": (TEN_THOUSAND_ROWS, False),
        "truncation": ([b"one", b" ".join([b"two"] * 30)], False),
    }
    return dict(zip(requests, _serve(exported, list(requests.values())), strict=True))


@pytest.fixture(scope="module")
def answers(served) -> dict:
    """The normal rows, zero rows, each hostile row alone, and all of them in one request."""
    normal_answer, none, mixed_answer = served["normal"], served["none"], served["mixed"]
    alone = [served["alone", name] for name in HOSTILE]
    _assert_answered(mixed_answer, len(NORMAL) + len(HOSTILE))
    return {
        "normal": normal_answer,
        "none": none,
        "alone": dict(zip(HOSTILE, alone, strict=True)),
        # The answer of each row of the mixed request, by its name (or index, normal rows).
        "mixed": {
            name: (mixed_answer["translation"][i], mixed_answer["source_truncated"][i])
            for i, name in enumerate([0, 1, *HOSTILE, 2, 3])
        },
        # Those of the n-best and prefix signatures.
        "mixed_more": {
            name: {
                signature: mixed_answer[signature]["translation"][i]
                for signature in ("nbest", "greedy_with_prefix", "beam_search_with_prefix")
            }
            for i, name in enumerate([0, 1, *HOSTILE, 2, 3])
        },
    }


def test_normal_rows_and_a_request_of_zero_rows(answers):
    _assert_answered(answers["normal"], len(NORMAL))
    assert answers["normal"]["translation"][0] == "3 1 4"
    assert answers["normal"]["source_truncated"] == [False] * len(NORMAL)
    _assert_answered(answers["none"], 0)


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_row_is_answered_alone_and_among_others(answers, name):
    _, cut = HOSTILE[name]
    alone = answers["alone"][name]
    _assert_answered(alone, 1)
    assert alone["source_truncated"] == [cut]
    # Among normal rows and the other hostile ones, it reads as it does alone.
    assert answers["mixed"][name] == (alone["translation"][0], cut)
    # So do its n-best list and its translation with itself as its target prefix (an
    # overlong one cut and flagged).
    more = answers["mixed_more"][name]
    for signature in ("nbest", "greedy_with_prefix", "beam_search_with_prefix"):
        assert more[signature] == alone[signature]["translation"][0], signature
    for signature in ("greedy_with_prefix", "beam_search_with_prefix"):
        assert alone[signature]["prefix_truncated"] == [name in ("300 words", "1 MB")]


def test_hostile_rows_leave_their_neighbours_alone(answers):
    normal = answers["normal"]
    expected = list(zip(normal["translation"], normal["source_truncated"], strict=True))
    assert [answers["mixed"][i] for i in range(len(NORMAL))] == expected


def test_ten_thousand_rows_in_one_request(served):
    """Decoded 16 rows at a time, sorted by length: each row as it reads in a small request."""
    few, many = served["few"], served["many"]
    _assert_answered(many, 10_000)
    expected = {
        row: (translation, cut)
        for row, translation, cut in zip(
            NORMAL_ROWS + SHORT_HOSTILE_ROWS,
            few["translation"],
            few["source_truncated"],
            strict=True,
        )
    }
    answered = zip(many["translation"], many["source_truncated"], strict=True)
    assert list(answered) == [expected[row] for row in TEN_THOUSAND_ROWS]


def test_serving_signature_reports_truncation(served):
    answer = served["truncation"]
    assert answer["outputs"] == ["score", "source_truncated", "translation"]
    assert answer["source_truncated"] == [False, True]


def test_a_long_row_costs_bounded_memory(tiny_translation_model, tmp_path):
    """A 3,000-word row among 16 (one sub-batch): the model has 2048 positions, but the
    source is cut at 128 tokens, so the other rows are padded to 128 at most (cut at 2048,
    the 16 rows' encoder attention alone would take about 1 GB)."""
    tiny = tiny_translation_model
    wide = tiny_transformer(vocab_size=tiny.source_tokenizer.vocab_size, max_length=2048)
    translator = Translator(wide, tiny.source_tokenizer, tiny.target_tokenizer, max_length=8)
    # `long_row_cost` asks serving_default alone: the one signature it needs is exported.
    path = export.export_translator(translator, tmp_path, "wide", signatures="serving_default")
    cost = long_row_cost(path, rows=16, sentences=NORMAL)
    assert cost["per_row_mb"] <= 4, cost


def _load_figures(start, loaded, peak, small, inter_op_threads=0, **more):
    return {
        "inter_op_threads": inter_op_threads,
        "rss_mb": {"start": start, "loaded": loaded, "peak": peak},
        "kinds": {"small": {"requests": small}},
        **more,
    }


def test_kernel_bounds_marks_each_bound_met_or_missed():
    """`serving_load.py --kernels both`: issue 79's bounds over both kernel sets' figures,
    each marked; the growth bound follows the inter-op threads, and the largest
    request's own strings are shown beside the growth they are part of."""
    lines = kernel_bounds(
        {
            "eigen": _load_figures(800, 1050, 1450, small=7000),
            "onednn": _load_figures(800, 950, 1600, small=5000),
        }
    ).splitlines()
    assert lines[0] == "issue 79's serving bounds, eigen | onednn:"
    assert lines[1] == "  MISS growth under load, MB (<= 512): +400 | +650"
    assert lines[2] == (
        "  MISS the loaded export over TensorFlow and tensorflow-text, MB (<= 204.8): +250 | +150"
    )
    assert lines[3] == "  MISS small requests answered (oneDNN >= Eigen: 0.71x): 7000 | 5000"
    met = kernel_bounds(
        {
            "eigen": _load_figures(
                800, 900, 1800, small=100, inter_op_threads=16, largest_request_mb=291.6
            ),
            "onednn": _load_figures(
                800, 900, 1700, small=100, inter_op_threads=16, largest_request_mb=290.2
            ),
        }
    ).splitlines()
    assert met[2] == "       of that growth, the largest request's own strings, MB: 292 | 290"
    assert [line[:6] for line in met[1:2] + met[3:]] == ["  ok  "] * 3
    assert "(<= 1024)" in met[1]


def test_the_serving_worker_runs_on_the_kernels_asked(monkeypatch):
    """`--kernels eigen` / `onednn` set TF_ENABLE_ONEDNN_OPTS in the serving process only;
    "default" leaves the environment's."""
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "mine")
    seen = []

    def fake_run(command, env, **kwargs):
        seen.append(env["TF_ENABLE_ONEDNN_OPTS"])
        return subprocess.CompletedProcess(command, 0, stdout="{}\n", stderr="")

    monkeypatch.setattr(serving_load.subprocess, "run", fake_run)
    for kernels in ("eigen", "onednn", "default"):
        serving_load._run_worker({"kernels": kernels}, timeout=1)
    assert seen == ["0", "1", "mine"]


def test_the_load_and_the_long_row_pass_their_kernels_to_the_worker(monkeypatch, tmp_path):
    """`run_load` and `long_row_cost` hand `kernels` to each worker they start, and
    refuse a kernel set they do not know."""
    tasks = []

    def fake_worker(task, timeout):
        tasks.append(task)
        return {"peak_mb": 1.0}

    monkeypatch.setattr(serving_load, "_run_worker", fake_worker)
    (tmp_path / "saved_model.pb").write_bytes(b"")
    serving_load.run_load(tmp_path, kernels="eigen")
    serving_load.long_row_cost(tmp_path, rows=2, kernels="onednn")
    assert [task["kernels"] for task in tasks] == ["eigen", "onednn", "onednn"]
    with pytest.raises(ValueError, match="kernels must be one of"):
        serving_load.run_load(tmp_path, kernels="mkl")
