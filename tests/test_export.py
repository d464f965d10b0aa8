"""SavedModel export: TF Serving layout, signatures, and a fresh process without the library."""

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

import keras_transformer_commands as commands
from keras_transformer.inference import export, loaded_export
from keras_transformer.inference.batch_decoding import JIT_SOURCE_LENGTH_STEP
from keras_transformer.inference.translator import Translator
from keras_transformer.layers.embedding import PositionalEmbedding
from keras_transformer.text import corpora
from keras_transformer.text.tokenizers import SentencePieceTokenizer, learn_sentencepiece_model
from keras_transformer.training import checkpoints
from tests.helpers import tiny_transformer

# Runs in a fresh interpreter where `import keras_transformer` fails.
FRESH_PROCESS = r"""
import json, sys
sys.modules["keras_transformer"] = None
import tensorflow as tf
import tensorflow_text  # noqa: F401
try:
    import keras_transformer  # noqa: F401
    raise SystemExit("keras_transformer must not be importable here")
except ImportError:
    pass
request = json.load(sys.stdin)
texts = [t.encode("latin-1") for t in request["texts"]]
prefixes = [t.encode("latin-1") for t in request["prefixes"]]


def strings(tensor):
    return [t.decode("utf-8") for t in tensor.numpy().reshape(-1)]


def text_of(rows):
    return tf.constant(rows, tf.string, shape=[len(rows)])


def answers(loaded):
    result = {}
    for name in ("serving_default", "beam_search", "greedy_with_prefix", "beam_search_with_prefix"):
        inputs = {"text": text_of(texts)}
        empty = {"text": text_of([])}
        if name.endswith("_with_prefix"):
            inputs["prefix"], empty["prefix"] = text_of(prefixes), text_of([])
        out = loaded.signatures[name](**inputs)
        result[name] = {
            "translation": strings(out["translation"]),
            "score": out["score"].numpy().tolist(),
            "source_truncated": out["source_truncated"].numpy().tolist(),
            "outputs": sorted(out),
        }
        if "prefix_truncated" in out:
            result[name]["prefix_truncated"] = out["prefix_truncated"].numpy().tolist()
        none = loaded.signatures[name](**empty)
        result[name]["empty"] = [none["translation"].shape.as_list(), none["score"].shape.as_list()]
    k = tf.constant(2)
    out = loaded.signatures["nbest"](text=text_of(texts), num_hypotheses=k)
    empty = loaded.signatures["nbest"](text=text_of([]), num_hypotheses=k)
    result["nbest"] = {
        "translations": [strings(row) for row in out["translations"]],
        "scores": out["scores"].numpy().tolist(),
        "source_truncated": out["source_truncated"].numpy().tolist(),
        "outputs": sorted(out),
        "empty": [empty["translations"].shape.as_list(), empty["scores"].shape.as_list()],
    }
    try:
        loaded.signatures["nbest"](text=text_of(texts[:1]), num_hypotheses=tf.constant(9))
    except tf.errors.InvalidArgumentError as error:
        result["nbest"]["too_many"] = "num_hypotheses must be" in error.message
    # Each row scored against its own greedy translation.
    greedy = [t.encode("utf-8") for t in result["serving_default"]["translation"]]
    out = loaded.signatures["score"](source=text_of(texts), target=text_of(greedy))
    result["score"] = {key: value.numpy().tolist() for key, value in out.items()}
    return result


# One process for every export given: each answers as it would alone.
json.dump([answers(tf.saved_model.load(path)) for path in sys.argv[1:]], sys.stdout)
"""

TEXTS = [
    "three one four",
    "",
    "  \t ",
    " ".join(["eight"] * 300),
    "one \xff\xfe two",  # sent as these raw bytes: not UTF-8
    "nine five",
] + ["two six"] * 58  # 64 rows: 4 sub-batches of the WordPiece exports (test_serving: 10,000)
# A target prefix a row, hostile ones among them: empty, whitespace, beyond the steps,
# undecodable bytes, a 1 MB string.
PREFIXES = (
    [
        "3",
        "",
        "  \t ",
        " ".join(["8"] * 40),
        "\xff\xfe 1",
        "9 5 7",
        "one two " * (1 << 17),
    ]
    + ["2", ""] * 28
    + [""]
)


def serve_in_fresh_process(path, texts, prefixes=None) -> dict:
    """`FRESH_PROCESS`'s answers for `texts` (sent as latin-1 bytes) from the export at
    `path`, and for `prefixes` (one a text, "" by default) through the prefix signatures."""
    (answers,) = serve_each_in_one_fresh_process([path], texts, prefixes)
    return answers


def serve_each_in_one_fresh_process(paths, texts, prefixes=None) -> list[dict]:
    """`serve_in_fresh_process` for each export of `paths`, all in one process: a
    process's start and TensorFlow's import are paid once."""
    prefixes = [""] * len(texts) if prefixes is None else prefixes
    run = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, *map(str, paths)],
        input=json.dumps({"texts": texts, "prefixes": prefixes}),
        capture_output=True,
        text=True,
        timeout=300 * len(paths),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def exported(tiny_export):
    """The session's export of the tiny model (conftest.py), read only."""
    return tiny_export.translator, tiny_export.root, tiny_export.path


@pytest.fixture(scope="module")
def exported_xla(tiny_export, tmp_path_factory):
    """The session's export's translator with its searches compiled by XLA (`jit_compile`):
    the loaded export compiles them. Its reference is the session's translator without
    XLA, whose searches the test process has traced already: the export must translate
    as it does."""
    reference = tiny_export.translator
    compiled = Translator(
        reference.model,
        reference.source_tokenizer,
        reference.target_tokenizer,
        dataclasses.replace(reference.options, jit_compile=True),
    )
    path = export.export_translator(compiled, tmp_path_factory.mktemp("xla_models"), "tiny")
    return reference, None, path


def test_xla_export_marks_both_searches_for_compilation(exported, exported_xla):
    """Greedy, beam and n-best search are functions that must compile with XLA (what the model
    server's --xla_cpu_compilation_enabled runs), one for each padded source length (16
    and 24 tokens for the tiny model's 24); the default export has none."""

    def compiled_functions(path):
        saved = saved_model_pb2.SavedModel()
        saved.ParseFromString((path / "saved_model.pb").read_bytes())
        library = saved.meta_graphs[0].graph_def.library.function
        return [f for f in library if f.attr["_XlaMustCompile"].b]

    translator, _, path = exported_xla
    assert translator.max_source_length == 24 and JIT_SOURCE_LENGTH_STEP == 16
    # Greedy, beam and n-best searches; prefixes decode without XLA.
    assert len(compiled_functions(path)) == 3 * 2
    assert compiled_functions(exported[2]) == []


@pytest.fixture(scope="module")
def exported_sentencepiece(demo_pairs, tmp_path_factory):
    """A cased joint SentencePiece translator (untrained: the export must equal it all the
    same, down to the normalization and detokenization inside the SavedModel)."""
    texts = [*corpora.texts(demo_pairs, 0), *corpora.texts(demo_pairs, 1), "Ein Café, 3 € 🎂!"]
    tokenizer = SentencePieceTokenizer(learn_sentencepiece_model(texts, vocab_size=400))
    model = tiny_transformer(vocab_size=tokenizer.vocab_size, share_embeddings=True)
    translator = Translator(model, tokenizer, tokenizer, max_length=16, beam_width=3)
    path = export.export_translator(translator, tmp_path_factory.mktemp("sp_models"), "sp")
    return translator, None, path


def test_tf_serving_layout_and_next_version(exported, tiny_translation_model):
    _, root, path = exported
    assert path == root / "tiny" / "1" and (path / "saved_model.pb").is_file()
    assert export.next_version(root / "tiny") == 2
    assert export.latest_version_dir(root / "tiny") == path
    with pytest.raises(FileExistsError):
        export.export_translator(
            tiny_translation_model.model,
            root,
            "tiny",
            version=1,
            source_tokenizer=tiny_translation_model.source_tokenizer,
            target_tokenizer=tiny_translation_model.target_tokenizer,
        )
    with pytest.raises(ValueError, match="tokenizer"):
        export.export_translator(tiny_translation_model.model, root, "other")
    # No half-written staging directory is left behind.
    assert sorted(p.name for p in (root / "tiny").iterdir()) == ["1"]


def test_an_export_of_fewer_signatures_offers_only_what_they_call(exported, tmp_path):
    """`signatures=` exports those signatures alone: the loaded export offers them, the
    methods they call and `serving_limits`, and translates as the full export does; what
    it lacks is refused naming the signature to export. The methods left out are neither
    traced nor saved (its graph is a fraction of the full one's), and the translator
    given keeps them."""
    translator, _, full_path = exported
    path = export.export_translator(translator, tmp_path, "greedy", signatures="serving_default")
    loaded, full = tf.saved_model.load(str(path)), tf.saved_model.load(str(full_path))
    assert list(loaded.signatures) == ["serving_default"]
    methods = [row.method for row in export.SIGNATURES]
    assert [name for name in methods if getattr(loaded, name, None) is not None] == ["translate"]
    assert all(callable(getattr(translator, name)) for name in methods)
    limits = {key: int(value) for key, value in loaded.serving_limits().items()}
    assert limits == {key: int(value) for key, value in full.serving_limits().items()}
    pb_bytes = [(p / "saved_model.pb").stat().st_size for p in (path, full_path)]
    assert pb_bytes[0] * 3 < pb_bytes[1], pb_bytes
    texts = ["three one four", "nine five", "", "seven seven two"]
    alone, among_six = (loaded_export.translate_rows(e, texts) for e in (loaded, full))
    assert [row[0::2] for row in alone] == [row[0::2] for row in among_six]
    # The same graph of the same weights in one process: equal up to float noise only.
    np.testing.assert_allclose(
        [row[1] for row in alone], [row[1] for row in among_six], rtol=0, atol=1e-6
    )
    refused = {
        "beam_search": lambda: loaded_export.translate_rows(loaded, texts, beam_width=2),
        "nbest": lambda: loaded_export.translate_nbest_rows(loaded, texts, 2),
        "greedy_with_prefix": lambda: loaded_export.translate_prefixed_rows(loaded, texts, texts),
        "score": lambda: loaded_export.score_pairs(loaded, [b"one"], [b"1"]),
    }
    for signature, call in refused.items():
        with pytest.raises(ValueError, match=f"with {signature} among its signatures"):
            call()


@pytest.mark.parametrize(
    "names", [["beam"], [], ["score", "score"]], ids=["unknown", "none", "twice"]
)
def test_the_signatures_to_export_are_named_from_the_table(exported, tmp_path, names):
    with pytest.raises(ValueError, match="serving_default, beam_search, score, nbest"):
        export.export_translator(exported[0], tmp_path, "refused", signatures=names)
    assert not (tmp_path / "refused").exists()
    with pytest.raises(ValueError, match="serving_default, beam_search"):  # before the run loads
        export.export_run(tmp_path / "no_run", tmp_path, "refused", signatures=names)
    # Any order given, the table's order kept.
    chosen = export.chosen_signatures(["score", "serving_default"])
    assert chosen == (export.SIGNATURES[0], export.SIGNATURES[2])


def test_the_export_saves_frozen_weights_and_leaves_the_translator_live(exported):
    """What is saved is the translator's frozen twin: its decoder's fused weights are
    variables of the SavedModel, which both signatures read (a change to them changes
    what each says), not computed per call; the translator given stays live."""
    translator, _, path = exported
    assert translator.decoder.fused_weights is None
    loaded = tf.saved_model.load.unshared(str(path))  # its weights are changed below
    saved = tf.nest.flatten(loaded.decoder.fused_weights)
    expected = tf.nest.flatten(translator.frozen().decoder.fused_weights)
    assert len(saved) == len(expected) > 0
    for variable, value in zip(saved, expected, strict=True):
        np.testing.assert_array_equal(variable.numpy(), value.numpy())
    text = tf.constant(["three one four", "nine five"])
    before = {
        name: loaded.signatures[name](text=text)["score"].numpy()
        for name in ("serving_default", "beam_search")
    }
    qkv = saved[0]  # the first block's query, key and value kernel
    qkv.assign(qkv * 2.0 + 0.3)
    for name in ("serving_default", "beam_search"):
        assert not np.array_equal(loaded.signatures[name](text=text)["score"].numpy(), before[name])


def test_the_export_stores_each_sinusoidal_table_once(exported):
    """Each sinusoidal position table is saved once and captured by every signature's
    graph, not held as a constant by each function that reads it (six signatures'
    copies were most of an export's graph and of its memory once loaded)."""
    translator, _, path = exported
    tables = [
        layer._positions().numpy()
        for layer in translator.model._flatten_layers()
        if isinstance(layer, PositionalEmbedding) and layer.position_layout != "learned"
    ]
    assert len(tables) == 2  # the encoder's and the decoder's

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((path / "saved_model.pb").read_bytes())
    graph = saved.meta_graphs[0].graph_def

    def table_constants(nodes):
        shapes = {table.shape for table in tables}
        return [
            tf.make_ndarray(node.attr["value"].tensor)
            for node in nodes
            if node.op == "Const"
            and tuple(d.size for d in node.attr["value"].tensor.tensor_shape.dim) in shapes
        ]

    in_functions = [c for f in graph.library.function for c in table_constants(f.node_def)]
    assert in_functions == []
    stored = table_constants(graph.node)
    assert len(stored) == len(tables)
    for table in tables:
        assert any(np.array_equal(table, constant) for constant in stored)


# The exports served in a fresh process, by kind: each with its fixture's name.
FRESH_EXPORTS = {
    "wordpiece": "exported",
    "sentencepiece": "exported_sentencepiece",
    "wordpiece_xla": "exported_xla",
}


@pytest.fixture(scope="module")
def served_fresh(request):
    """kind -> (the export's in-memory translator, the answers of the export served in
    one process with only tensorflow and tensorflow_text, for `TEXTS` and `PREFIXES`)."""
    made = {kind: request.getfixturevalue(name) for kind, name in FRESH_EXPORTS.items()}
    served = serve_each_in_one_fresh_process(
        [path for _, _, path in made.values()], TEXTS, PREFIXES
    )
    return {kind: (made[kind][0], answers) for kind, answers in zip(made, served, strict=True)}


@pytest.mark.parametrize("kind", list(FRESH_EXPORTS))
def test_fresh_process_without_the_library_gives_the_same_translations(kind, served_fresh):
    """Every signature, in a process with only tensorflow and tensorflow_text, answers
    as the translator in memory does, hostile rows and prefixes included."""
    translator, served = served_fresh[kind]
    assert len(TEXTS) == len(PREFIXES) == 64
    raw = [t.encode("latin-1") for t in TEXTS]
    prefixes = [t.encode("latin-1") for t in PREFIXES]
    expected = {
        "serving_default": translator(raw),
        "beam_search": translator(raw, method="beam", beam_width=3),
        "greedy_with_prefix": translator(raw, prefix=prefixes),
        "beam_search_with_prefix": translator(raw, method="beam", beam_width=3, prefix=prefixes),
    }
    cut_sources = [row == " ".join(["eight"] * 300) for row in TEXTS]
    for name, outputs in expected.items():
        translations = [t.decode("utf-8") for t in outputs["translation"].numpy()]
        assert served[name]["translation"] == translations, name
        np.testing.assert_allclose(served[name]["score"], outputs["score"].numpy(), atol=1e-4)
        assert np.all(np.isfinite(served[name]["score"])), name
        truncated = outputs["source_truncated"].numpy().tolist()
        assert served[name]["source_truncated"] == truncated == cut_sources, name
        assert len(served[name]["score"]) == 64
        assert served[name]["empty"] == [[0], [0]]
    for name in ("greedy_with_prefix", "beam_search_with_prefix"):
        assert served[name]["outputs"] == [
            "prefix_truncated",
            "score",
            "source_truncated",
            "translation",
        ]
        cut = expected[name]["prefix_truncated"].numpy().tolist()
        assert served[name]["prefix_truncated"] == cut == [i in (3, 6) for i in range(64)]
        # Rows without a prefix read as they do without one (the trained model's
        # beams, ties aside).
        plain = "serving_default" if name == "greedy_with_prefix" else "beam_search"
        for i in (1, 2, 8, 63):
            assert served[name]["translation"][i] == served[plain]["translation"][i], (name, i)
    # n-best: the first of each row is the beam's translation and score.
    nbest = served["nbest"]
    assert nbest["outputs"] == ["scores", "source_truncated", "translations"]
    assert nbest["empty"] == [[0, 2], [0, 2]] and nbest["too_many"]
    assert [row[0] for row in nbest["translations"]] == served["beam_search"]["translation"]
    np.testing.assert_allclose(
        np.array(nbest["scores"])[:, 0], served["beam_search"]["score"], atol=1e-5
    )
    assert nbest["source_truncated"] == cut_sources
    in_memory = translator(raw, method="beam", beam_width=3, num_hypotheses=2)
    assert nbest["translations"] == [
        [t.decode("utf-8") for t in row] for row in in_memory["translations"].numpy()
    ]
    np.testing.assert_allclose(nbest["scores"], in_memory["scores"].numpy(), atol=1e-4)
    scores = np.array(nbest["scores"])
    assert np.all(np.isfinite(scores)) and np.all(scores <= 0)
    if kind.startswith("wordpiece"):  # the trained tiny model
        assert served["serving_default"]["translation"][0] == "3 1 4"
        prefixed = served["greedy_with_prefix"]["translation"]
        assert prefixed[0].startswith("3") and prefixed[5].startswith("9 5 7")
        assert prefixed[3] == " ".join(["8"] * (translator.max_length - 1))


@pytest.fixture(scope="module")
def served_bfloat16(tiny_export, tmp_path_factory):
    """(the float32 translator, its bfloat16 twin in memory, the path of the bfloat16
    export of the session's export's translator, that export's `FRESH_PROCESS` answers)."""
    reference = tiny_export.translator
    root = tmp_path_factory.mktemp("bfloat16_models")
    path = export.export_translator(reference, root, "tiny", compute_dtype="bfloat16")
    twin = reference.frozen(checkpoints.with_dtype(reference.model, "bfloat16", True))
    return reference, twin, path, serve_in_fresh_process(path, TEXTS, PREFIXES)


# How far a bfloat16 export's scores may be from float32's, per scored token: its 8 bits
# of precision round each weight and activation by up to 2**-8 relatively, and the tiny
# model's log-probabilities come out within a few hundredths.
BFLOAT16_SCORE_ATOL_PER_TOKEN = 0.05


@pytest.mark.half_precision
def test_a_bfloat16_export_serves_as_its_twin_in_memory_and_near_float32(served_bfloat16):
    """A bfloat16 export holds bfloat16 weights (half the bytes), records its compute
    dtype, answers every signature in a process with only tensorflow and tensorflow_text
    as its in-memory twin does, and translates the trained tiny model as float32 does:
    the same tokens where its choices are far from ties, scores within a stated
    tolerance."""
    reference, twin, path, served = served_bfloat16
    saved = tf.train.load_checkpoint(str(path / "variables" / "variables"))
    assert {d for d in saved.get_variable_to_dtype_map().values() if d.is_floating} == {tf.bfloat16}
    assert commands.export_compute_dtype(path) == "bfloat16"
    raw = [t.encode("latin-1") for t in TEXTS]
    prefixes = [t.encode("latin-1") for t in PREFIXES]
    searches = {
        "serving_default": {},
        "beam_search": dict(method="beam", beam_width=3),
        "greedy_with_prefix": dict(prefix=prefixes),
        "beam_search_with_prefix": dict(method="beam", beam_width=3, prefix=prefixes),
    }
    for name, search in searches.items():
        mine, theirs = twin(raw, **search), reference(raw, **search)
        assert served[name]["translation"] == strings(mine["translation"]), name
        np.testing.assert_allclose(served[name]["score"], mine["score"].numpy(), atol=1e-4)
        # Against float32: the trained model's rows (the first six are hostile inputs).
        far = [i for i in range(len(TEXTS)) if TEXTS[i] in ("three one four", "two six")]
        assert [served[name]["translation"][i] for i in far] == [
            strings(theirs["translation"])[i] for i in far
        ], name
        lengths = theirs["lengths"].numpy()  # tokens scored, [END] and any prefix included
        np.testing.assert_array_less(
            np.abs(np.array(served[name]["score"])[far] - theirs["score"].numpy()[far]),
            BFLOAT16_SCORE_ATOL_PER_TOKEN * lengths[far],
        )
    nbest = twin(raw, method="beam", beam_width=3, num_hypotheses=2)
    assert served["nbest"]["translations"] == [strings(row) for row in nbest["translations"]]
    scored = served["score"]
    assert scored["length"] == [
        len(t.split()) + 1 for t in served["serving_default"]["translation"]
    ]
    # Teacher-forced through the whole decoder, rounded in another order than the steps.
    np.testing.assert_array_less(
        np.abs(np.array(scored["score"]) - served["serving_default"]["score"]),
        BFLOAT16_SCORE_ATOL_PER_TOKEN * np.array(scored["length"]),
    )


@pytest.mark.half_precision
def test_loading_a_bfloat16_export_warns_where_its_products_would_be_emulated(
    served_bfloat16, tiny_export, monkeypatch
):
    """`load_translator` warns, naming the export and why, where the CPU lacks bfloat16
    instructions or oneDNN's kernels are off; not where both are there, nor for float32."""
    path = served_bfloat16[2]
    monkeypatch.setattr(loaded_export, "slow_bfloat16_reason", lambda: "no bfloat16 here")
    with pytest.warns(loaded_export.SlowExportWarning, match="computes in bfloat16, but no bf"):
        loaded_export.load_translator(path.parent)
    with warnings.catch_warnings():
        warnings.simplefilter("error", loaded_export.SlowExportWarning)
        loaded_export.load_translator(tiny_export.path)
        monkeypatch.setattr(loaded_export, "slow_bfloat16_reason", lambda: None)
        loaded_export.load_translator(path)


def strings(tensor) -> list[str]:
    return [t.decode("utf-8") for t in tensor.numpy().reshape(-1)]


def test_saved_model_cli_lists_the_signatures(exported):
    _, _, path = exported
    tool = Path(sys.executable).parent / "saved_model_cli"
    if not tool.exists():
        pytest.skip("saved_model_cli is not installed beside this Python")
    shown = subprocess.run(
        [str(tool), "show", "--dir", str(path), "--all"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    for name in (
        "serving_default",
        "beam_search",
        "nbest",
        "greedy_with_prefix",
        "beam_search_with_prefix",
    ):
        assert f"signature_def['{name}']" in shown.stdout
    assert "inputs['text']" in shown.stdout and "outputs['translation']" in shown.stdout
    assert "outputs['score']" in shown.stdout and "DT_STRING" in shown.stdout
    assert "outputs['source_truncated']" in shown.stdout and "DT_BOOL" in shown.stdout


def test_the_signatures_table_is_what_the_export_serves(exported):
    """Each row of `export.SIGNATURES` is a signature of the export, with the row's
    inputs (names, dtypes, shapes) and outputs, and the export has no other."""
    _, _, path = exported
    loaded = tf.saved_model.load(str(path))
    assert sorted(loaded.signatures) == sorted(row.name for row in export.SIGNATURES)
    for row in export.SIGNATURES:
        function = loaded.signatures[row.name]
        _, inputs = function.structured_input_signature
        assert inputs == {spec.name: spec for spec in row.inputs}, row.name
        assert sorted(function.structured_outputs) == sorted(row.outputs), row.name
    # The limits it was exported with read back (16 tokens, beam width 3, sub-batches of
    # 16 rows; sources cut at the model's 24 tokens).
    limits = {key: int(value) for key, value in loaded.serving_limits().items()}
    assert limits == {
        "max_source_length": 24,
        "sub_batch_size": 16,
        "max_length": 16,
        "beam_width": 3,
    }


def test_an_export_killed_mid_write_shows_no_version_and_the_next_export_cleans_up(
    exported, monkeypatch, tmp_path
):
    translator, _, _ = exported
    root = tmp_path
    model_dir = root / "killed"
    model_dir.mkdir()
    # Staging directories that killed exports left: one of an earlier version, one
    # of a process that is gone, and one of an export still running (this process).
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    left = [model_dir / ".1-abcd_123", model_dir / f".1-{gone.pid}-abcd_123"]
    running = model_dir / f".7-{os.getpid()}-abcd_123"
    for path in [*left, running]:
        path.mkdir()
        (path / "saved_model.pb").write_bytes(b"half")

    class Killed(Exception):
        pass

    def die_mid_write(obj, path, **kwargs):
        Path(path, "saved_model.pb").write_bytes(b"half")
        raise Killed

    # What the export writes is this file's other tests': one signature does here.
    one = {"signatures": "serving_default"}
    monkeypatch.setattr(export.tf.saved_model, "save", die_mid_write)
    with pytest.raises(Killed):
        export.export_translator(translator, root, "killed", **one)
    monkeypatch.undo()
    # No version is visible to TF Serving, whole or half.
    assert not [p for p in model_dir.iterdir() if p.name.isdigit()]
    with pytest.raises(FileNotFoundError):
        export.latest_version_dir(model_dir)
    path = export.export_translator(translator, root, "killed", **one)
    assert path == model_dir / "1" and (path / "saved_model.pb").stat().st_size > 1000
    assert sorted(p.name for p in model_dir.iterdir()) == sorted(["1", running.name])
    assert export.next_version(model_dir) == 2
