"""Shared fixtures.

Tokenizers learned from a slice of the built-in corpus, and a tiny Transformer
trained in seconds on a number-words -> digits task.

"three one four" -> "3 1 4": the model must learn a per-token mapping and
where to stop, which is enough to make the decoding tests meaningful (a
random model would not end its rows or rank beams sensibly).
"""

from __future__ import annotations

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.constants import RESERVED_TOKENS
from keras_transformer.text import corpora
from keras_transformer.text.tokenizers import Tokenizer, learn_vocabulary
from keras_transformer.training import prepare, run_dir
from tests.helpers import TOKENIZER, tiny_transformer, tiny_transformer_kwargs, write_corpus

NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
DIGITS = [str(d) for d in range(10)]
# The number-words model: the factory's tiny Transformer with two blocks, so
# that decoding runs through a stack, and room for 24 tokens.
TINY_MODEL_OVERRIDES = dict(num_layers=2, max_length=24)


# The longest files first: the README's test command spreads whole files over the cores
# (pytest-xdist, `--dist loadfile`) in collection order, so a long file collected last
# would run alone at the end. The tutorial's replay is one chain of cells (the longest
# file: 401 of the suite's 2,026 s in one process on a slow machine); the translator's
# XLA searches and the speed levers' trainings come next.
LONGEST_FILES = ("test_tutorial.py", "test_translator.py", "test_levers.py")


# The files that export, reload and trace the most SavedModels and searches (six
# signatures an export). A process keeps what TensorFlow traced (graphs, XLA's
# compiled code) until it ends: run in the same pytest workers as the rest, one
# worker grew past 19 GB (test_cli.py's exports and in-process commands alone
# added 7.5 GB). The README's test command runs them in a second pytest run of
# their own (`-m exports`), so no worker holds both.
EXPORT_FILES = (
    "test_translator.py",
    "test_export.py",
    "test_serving.py",
    "test_scoring.py",
    "test_cli.py",
)


def pytest_itemcollected(item):
    if item.path.name in EXPORT_FILES:
        item.add_marker(pytest.mark.exports)


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
    model.fit((context, target[:, :-1]), target[:, 1:], batch_size=64, epochs=6, verbose=0)
    test_sources, _ = _number_sentences(np.random.default_rng(1), 16)
    return types.SimpleNamespace(
        model=model,
        source_tokenizer=source_tokenizer,
        target_tokenizer=target_tokenizer,
        sentences=test_sources,
        config=config,
    )


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
