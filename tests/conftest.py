"""Shared fixtures.

Tokenizers learned from a slice of the built-in corpus, and a tiny Transformer
trained in seconds on a number-words -> digits task.

"three one four" -> "3 1 4": the model must learn a per-token mapping and
where to stop, which is enough to make the decoding tests meaningful (a
random model would not end its rows or rank beams sensibly).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import resource
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.constants import RESERVED_TOKENS
from keras_transformer.inference import export
from keras_transformer.inference.translator import Translator
from keras_transformer.text import corpora
from keras_transformer.text.tokenizers import Tokenizer, learn_vocabulary
from keras_transformer.training import prepare, run_dir
from tests.helpers import TOKENIZER, tiny_transformer, tiny_transformer_kwargs, write_corpus

NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
DIGITS = [str(d) for d in range(10)]
# The number-words model: the factory's tiny Transformer with two blocks, so
# that decoding runs through a stack, and room for 24 tokens.
TINY_MODEL_OVERRIDES = dict(num_layers=2, max_length=24)


# The longest files first (by their time in one `--durations=0` run of the README's test
# command, 2026-12-02; every file over 15 s, so that none of them is handed out last):
# pytest-xdist's `--dist loadfile` hands whole files to the two processes, so a
# long file handed out last would run alone at the end. xdist would order the files by
# their number of tests instead; `pytest_configure` keeps this order.
LONGEST_FILES = (
    "test_docs.py",
    "test_translator.py",
    "test_prepared.py",
    "test_export.py",
    "test_decoding.py",
    "test_levers.py",
    "test_backends.py",
    "test_tutorial.py",
    "test_model.py",
    "test_backup.py",
    "test_decoder_step.py",
    "test_training.py",
    "test_notebooks.py",
    "test_cli.py",
    "test_data.py",
    "test_pretrained_run.py",
    "test_serving.py",
    "test_callbacks.py",
    "test_scoring.py",
    "test_distribute.py",
    "test_corpora.py",
    "test_tokenizers.py",
    "test_evaluation.py",
    "test_checkpoints.py",
    "test_query_chunks.py",
)


try:  # glibc's malloc_trim; absent elsewhere (musl, macOS)
    _LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
    _LIBC.malloc_trim  # noqa: B018
except (OSError, AttributeError, TypeError):
    _LIBC = None


def _cpu_seconds() -> float:
    """The CPU time this process has used so far (user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# A gauge of the machine's speed, printed beside the suite's figures: this file is loaded
# when a test process starts, so by now the process has spent its start, TensorFlow's
# import (most of it) and this library's. The same suite's time moves with this machine's
# speed from hour to hour (RESULTS.md); runs are compared by it, not by their time alone.
_START_CPU_SECONDS = _cpu_seconds()


def _rss_gb() -> float:
    """This process's resident memory now, in GB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 1e9


def _peak_rss_gb() -> float:
    """This process's peak resident memory so far, in GB (Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


# Test id -> the memory the test added to its process, in GB. A process keeps some of
# what TensorFlow built until it ends (XLA's compiled code, each traced training step,
# which holds the layer norm's registered gradient), so a test's growth stays with its
# pytest worker: the summary names the files and tests that grow most.
_GROWTH: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _rss_gb()
    yield
    _GROWTH[item.nodeid] = _rss_gb() - before


@pytest.fixture(scope="module", autouse=True)
def _collect_and_freeze_around_each_file():
    """After each file, its garbage is collected and the memory its objects freed goes
    back to the system (in its last test's figures): TensorFlow's many threads leave
    glibc's arenas holding freed blocks that the next file's allocations, of other sizes,
    would not reuse.

    Before each file, what the last file left (its last test's fixtures are gone by now)
    is collected and the rest frozen (`gc.freeze`): most of it lives until the process
    ends (the imports, the session's fixtures, each traced function's graph), and the
    collections of the files to come skip it instead of walking all of it each time.
    Collections took 130 s of the suite's CPU time without it, 40 s with it
    (`gc.callbacks`, summed over both test processes of a run of the test command). A
    cycle among frozen objects that later dies stays in memory until the process ends."""
    gc.collect()
    gc.freeze()
    yield
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


@pytest.fixture(scope="session", autouse=True)
def _one_load_per_export():
    """`tf.saved_model.load` keeps what it loaded in the process until the process ends
    (4 loads of the tiny export, each deleted: +1.3 GB), and the CLI's tests load one
    export for every command they run. So within a test process each export is loaded
    once and shared: the key is the SavedModel's file and its modification time, so an
    export that a test rewrites or damages is loaded anew, and failures are not kept. A test
    that changes what it loaded (assigns to its variables) loads a copy of its own with
    `tf.saved_model.load.unshared`: the shared one must stay as the export wrote it."""
    load = tf.saved_model.load
    loaded = {}

    def load_once(export_dir, *args, **kwargs):
        graph = os.path.join(os.fspath(export_dir), "saved_model.pb")
        if args or kwargs or not os.path.isfile(graph):
            return load(export_dir, *args, **kwargs)
        key = (os.path.realpath(graph), os.stat(graph).st_mtime_ns)
        if key not in loaded:
            loaded[key] = load(export_dir)
        return loaded[key]

    load_once.unshared = load
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tf.saved_model, "load", load_once)
        yield


def pytest_sessionfinish(session):
    # An xdist worker hands its figures to the controller (`pytest_testnodedown`).
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["peak_rss_gb"] = _peak_rss_gb()
        workeroutput["start_cpu_s"] = _START_CPU_SECONDS
        workeroutput["growth_gb"] = dict(_GROWTH)


# Worker id -> the figures its `pytest_sessionfinish` handed over.
_WORKER_FIGURES: dict[str, dict] = {}


@pytest.hookimpl(optionalhook=True)  # an xdist hook
def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", {})
    if "peak_rss_gb" in output:
        _WORKER_FIGURES[node.gateway.id] = output
        _GROWTH.update(output["growth_gb"])


def pytest_terminal_summary(terminalreporter):
    """The memory each test process peaked at (the suite must fit a 16 GB machine), the
    files that added the most, and the gauge of the machine's speed."""
    figures = _WORKER_FIGURES or {
        "main": {"peak_rss_gb": _peak_rss_gb(), "start_cpu_s": _START_CPU_SECONDS}
    }
    peaks = {name: output["peak_rss_gb"] for name, output in figures.items()}
    listed = ", ".join(f"{name} {gb:.1f} GB" for name, gb in sorted(peaks.items()))
    terminalreporter.write_line(f"peak RSS per test process: {listed}")
    starts = {name: output["start_cpu_s"] for name, output in figures.items()}
    listed = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in sorted(starts.items()))
    terminalreporter.write_line(
        f"CPU to start each test process (TensorFlow's import most of it; this machine's "
        f"speed gauge): {listed}"
    )
    by_file: dict[str, float] = {}
    for nodeid, gb in _GROWTH.items():
        name = nodeid.split("::")[0].rsplit("/", 1)[-1]
        by_file[name] = by_file.get(name, 0.0) + gb
    for kind, growth, count in (("file", by_file, 8), ("test", _GROWTH, 5)):
        most = sorted(growth.items(), key=lambda item: -item[1])[:count]
        listed = ", ".join(f"{name} {gb:+.2f}" for name, gb in most)
        terminalreporter.write_line(f"memory added by {kind} (GB): {listed}")


def pytest_configure(config):
    # pytest-xdist's workers share the machine's cores: each worker's TensorFlow thread
    # pools (and those of the processes its tests start, which inherit the environment) get
    # the worker's share, not a thread for every core of the machine: idle pool threads
    # spin on the cores the other workers need. Read when the first TensorFlow op makes
    # the pools, which is after this. A value set in the environment is kept.
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")  # set in the workers only
    if workers:
        share = max(1, len(os.sched_getaffinity(0)) // int(workers))
        for pool in ("TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS"):
            os.environ.setdefault(pool, str(share))
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's: keep LONGEST_FILES' order
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return LONGEST_FILES.index(name) if name in LONGEST_FILES else len(LONGEST_FILES)

    items.sort(key=rank)  # stable: the order within a file and among the rest is kept


def _number_sentences(rng: np.random.Generator, count: int) -> tuple[list[str], list[str]]:
    sources, targets = [], []
    for _ in range(count):
        digits = rng.integers(0, 10, size=rng.integers(1, 8))
        sources.append(" ".join(NUMBER_WORDS[d] for d in digits))
        targets.append(" ".join(DIGITS[d] for d in digits))
    return sources, targets


@pytest.fixture(scope="session")
def tiny_translation_model():
    """The trained number-words -> digits model, as a namespace.

    Fields: model, source_tokenizer, target_tokenizer, sentences (16 unseen
    sources) and config (the model's constructor arguments).

    Ten epochs, so that the model has learned the task whichever kernels trained it:
    at six it was still mid-descent and its weights followed the kernels' rounding (on
    one AVX-512 CPU, loss 0.21 on Eigen's kernels and 0.10 on oneDNN's; on Eigen's one
    of the 16 sentences never ended). At ten, its greedy choices on the 16 sentences
    lead the runner-up by 2.4 or more in log-probability on both, far above the float
    error between two computations, which lets the tests compare tokens exactly there
    (`test_decoding.py::test_the_tiny_model_s_greedy_choices_are_far_from_ties`).
    """
    keras.utils.set_random_seed(0)
    source_tokenizer = Tokenizer(RESERVED_TOKENS + NUMBER_WORDS, name="source_tokenizer")
    target_tokenizer = Tokenizer(RESERVED_TOKENS + DIGITS, name="target_tokenizer")
    sources, targets = _number_sentences(np.random.default_rng(0), 1536)
    context = source_tokenizer.tokenize(tf.constant(sources)).to_tensor()
    target = target_tokenizer.tokenize(tf.constant(targets)).to_tensor()
    config = tiny_transformer_kwargs(
        input_vocab_size=source_tokenizer.vocab_size,
        target_vocab_size=target_tokenizer.vocab_size,
        **TINY_MODEL_OVERRIDES,
    )
    model = tiny_transformer(**config)
    model.compile(
        optimizer=keras.optimizers.Adam(5e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
    )
    model.fit((context, target[:, :-1]), target[:, 1:], batch_size=64, epochs=10, verbose=0)
    test_sources, _ = _number_sentences(np.random.default_rng(1), 16)
    return types.SimpleNamespace(
        model=model,
        source_tokenizer=source_tokenizer,
        target_tokenizer=target_tokenizer,
        sentences=test_sources,
        config=config,
    )


@pytest.fixture(scope="session")
def tiny_translator(tiny_translation_model):
    """The tiny model's `Translator` (16 generated tokens at most, the other settings at
    their defaults), shared by the tests that only call it: each traced search stays in
    the process until it ends, so one translator traced once costs the suite once."""
    tiny = tiny_translation_model
    return Translator(tiny.model, tiny.source_tokenizer, tiny.target_tokenizer, max_length=16)


@pytest.fixture(scope="session")
def tiny_export(tiny_translation_model, tmp_path_factory):
    """The tiny model's SavedModel, as a namespace: `translator` (the one exported: 16
    tokens, beam width 3, sub-batches of 16 rows), `root` (the export root) and `path`
    (`root/tiny/1`). Made once per test process, for the tests that only read it: an
    export traces its six signatures, which stay in the process until it ends."""
    tiny = tiny_translation_model
    translator = Translator(
        tiny.model,
        tiny.source_tokenizer,
        tiny.target_tokenizer,
        max_length=16,
        beam_width=3,
        sub_batch_size=16,
    )
    root = tmp_path_factory.mktemp("saved_models")
    path = export.export_translator(translator, root, "tiny")
    return types.SimpleNamespace(translator=translator, root=root, path=path)


@pytest.fixture(scope="session")
def tiny_run_dir(tiny_translation_model, tmp_path_factory):
    """A run directory (config.json, vocabularies, checkpoints/best.keras) of the tiny model."""
    tiny = tiny_translation_model
    path = tmp_path_factory.mktemp("tiny_run")
    run_dir.write_config(path, {"model": tiny.config, "tokenizer": {"lower_case": True}})
    tiny.source_tokenizer.save_vocabulary(path / run_dir.SOURCE_VOCAB_FILE)
    tiny.target_tokenizer.save_vocabulary(path / run_dir.TARGET_VOCAB_FILE)
    (path / run_dir.CHECKPOINT_DIR).mkdir()
    tiny.model.save(path / run_dir.BEST_CHECKPOINT)
    return path


@pytest.fixture(scope="session")
def demo_pairs():
    return corpora.demo_corpus(num_pairs=600, seed=1)


@pytest.fixture(scope="session")
def demo_tokenizers(demo_pairs):
    source = learn_vocabulary(corpora.texts(demo_pairs, 0), vocab_size=300, lower_thresh=1)
    target = learn_vocabulary(corpora.texts(demo_pairs, 1), vocab_size=300, lower_thresh=1)
    return Tokenizer(source), Tokenizer(target)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Line-aligned files of 700 + 60 built-in pairs, the training files with a bad line."""
    directory = tmp_path_factory.mktemp("corpus")
    pairs = corpora.demo_corpus(760, seed=3)
    train_pairs, val_pairs = pairs[:700], pairs[700:]
    src, tgt = write_corpus(directory, train_pairs)
    # Line 5 loses its target: a counted skip, the alignment kept.
    lines = tgt.read_text(encoding="utf-8").split("\n")
    lines[4] = ""
    tgt.write_text("\n".join(lines), encoding="utf-8")
    val_src, val_tgt = write_corpus(directory, val_pairs, "val")
    settings = {
        **TOKENIZER,
        "src": str(src),
        "tgt": str(tgt),
        "val_src": str(val_src),
        "val_tgt": str(val_tgt),
    }
    kept = train_pairs[:4] + train_pairs[5:]
    return settings, kept, val_pairs


@pytest.fixture(scope="module")
def prepared_dir(corpus, tmp_path_factory):
    settings, _, _ = corpus
    return prepare.prepare(settings, tmp_path_factory.mktemp("p") / "data", shard_pairs=250)
