"""`prepare`: a corpus tokenized once into a prepared directory (see `prepared`).

    keras-transformer prepare --src train.en --tgt train.de --val-src val.en \
        --val-tgt val.de --preset base --output data/wmt

The corpus is streamed: read pair by pair (`corpora.iter_parallel_files`,
`iter_tsv`, tfds), tokenized a chunk at a time and written a shard at a time,
so memory does not grow with the corpus. The tokenizer is learned from a
bounded random sample of the training sentences (or taken from a run or
another prepared directory), then every pair is tokenized once.

Tokenizing runs in tf.data with the run's own graph tokenizers, parallel over
the cores (`num_parallel_calls`): the ids are those the exported model's
tokenizer gives, by construction, for SentencePiece and WordPiece alike, and
tf.data's threads run the C++ ops without copying the text into worker
processes as multiprocessing would.

Everything is written into a hidden sibling directory (`.partial.NAME`) that
is renamed to NAME once its index is written: an interrupted prepare leaves no
directory that `train` accepts, and the next one starts clean.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import random
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_transformer import atomic
from keras_transformer.text import corpora, prepared
from keras_transformer.training import run_dir as run_dir_lib
from keras_transformer.training.config import TrainConfig
from keras_transformer.training.tokenizer_files import (
    copy_tokenizer_files,
    learn_tokenizer_file,
    sides_of_files,
)

logger = logging.getLogger(__name__)

# Pairs a shard holds (about: a shard ends at the first chunk past this many).
DEFAULT_SHARD_PAIRS = 100_000
# Sentences the tokenizer learns from, at most: a random sample of the training text.
# SentencePiece's training memory grows with the sentences it learns from, and this bound
# keeps a prepare of any corpus within a laptop's memory (benchmarks/RESULTS.md, "Figures
# behind design choices"); SentencePiece's own examples learn from 1M sentences.
DEFAULT_TOKENIZER_SENTENCES = 500_000
# Pairs tokenized in one call of the graph tokenizers.
CHUNK_PAIRS = 4096
TRAIN, VALIDATION = prepared.SPLITS

PairStream = Callable[[], Iterator[tuple[str, str, bool]]]


def prepare(
    config: dict | TrainConfig,
    output_dir: str | os.PathLike,
    tokenizer_from: str | os.PathLike | None = None,
    shard_pairs: int = DEFAULT_SHARD_PAIRS,
    tokenizer_sentences: int = DEFAULT_TOKENIZER_SENTENCES,
) -> Path:
    """Tokenizes the corpus `config` names into the prepared directory `output_dir`.

    Args:
        config: the corpus (corpus, src/tgt, tsv, tfds_name, demo settings),
            its validation set (val_src/val_tgt, val_tsv, or val_fraction held
            out at random by `seed`) and the tokenizer settings, as for `train`.
        output_dir: the directory to write; it must not exist.
        tokenizer_from: a run directory or prepared directory whose tokenizer
            (files and settings) to take instead of learning one.
        shard_pairs: pairs per shard (about); workers read disjoint shards.
        tokenizer_sentences: learn the tokenizer from a random sample of at
            most this many training sentences.

    Returns:
        `output_dir`, whole.
    """
    if isinstance(config, dict):
        config = TrainConfig.from_dict(config)
    if tokenizer_from is not None:
        config = _with_multilingual_tokenizer(config, Path(tokenizer_from))
    config.validate()
    if config.corpus == "prepared":
        raise ValueError("prepare reads a corpus (files, tsv, tfds or demo), not prepared data.")
    for name, value in (("shard_pairs", shard_pairs), ("tokenizer_sentences", tokenizer_sentences)):
        if value <= 0:
            raise ValueError(f"{name} must be positive. Received: {name}={value}")
    output_dir = Path(output_dir)
    if output_dir.exists():
        raise ValueError(
            f"{output_dir} exists: prepare writes a new directory (remove it, or choose another)."
        )
    if tokenizer_from is not None:
        settings, source = _tokenizer_source(Path(tokenizer_from))
        if settings["kind"] == "multilingual":
            # One tokenizer of many languages: this corpus' are the prepare's own.
            settings = {**settings, **config.tokenizer_kwargs()}
    else:
        settings, source = config.tokenizer_kwargs(), None
    streams = _pair_streams(config)

    partial = atomic.partial_path(output_dir)
    if partial.exists():  # what an interrupted prepare left: never resumed, never trusted
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    try:
        if source is None:
            _learn_tokenizers(config, settings, streams[TRAIN], partial, tokenizer_sentences)
        else:
            copy_tokenizer_files(source, partial, settings)
        source_tokenizer, target_tokenizer = run_dir_lib.make_tokenizers(partial, settings)
        vocab_sizes = (source_tokenizer.vocab_size, target_tokenizer.vocab_size)
        dtype = np.uint16 if max(vocab_sizes) <= np.iinfo(np.uint16).max + 1 else np.int32
        writers = {
            split: _ShardWriter(partial, split, shard_pairs, dtype) for split in prepared.SPLITS
        }
        for split, stream in streams.items():
            for held_out, ids in _tokenized_chunks(stream(), source_tokenizer, target_tokenizer):
                for is_validation, writer in ((False, writers[split]), (True, writers[VALIDATION])):
                    rows = held_out == is_validation
                    if rows.any():
                        writer.add(*(_rows(flat, lengths, rows) for flat, lengths in ids))
        index = {
            "format": prepared.FORMAT,
            "tokenizer": settings,
            "files": run_dir_lib.tokenizer_fingerprints(partial, settings),
            "vocab_sizes": list(vocab_sizes),
            "token_dtype": np.dtype(dtype).name,
            "corpus": _corpus_description(config),
            "splits": {split: writer.close() for split, writer in writers.items()},
        }
        for split in prepared.SPLITS:
            if not index["splits"][split]["pairs"]:
                raise ValueError(f"The corpus gave no {split} pairs to prepare.")
        run_dir_lib.write_json_atomically(partial / prepared.INDEX_FILE, index, indent=2)
        os.replace(partial, output_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return output_dir


def _with_multilingual_tokenizer(config: TrainConfig, directory: Path) -> TrainConfig:
    """`config`, taking a multilingual checkpoint's tokenizer from `directory` (a run or
    prepared directory): its kind, and the corpus' languages, checked against its codes
    (the prepared directory's own where not given)."""
    if (directory / prepared.INDEX_FILE).is_file():
        settings = prepared.PreparedData(directory).tokenizer_settings
    elif (directory / run_dir_lib.CONFIG_FILE).is_file():
        settings = run_dir_lib.tokenizer_settings(run_dir_lib.read_config(directory))
    else:
        return config  # refused with its reason by `_tokenizer_source`
    if settings["kind"] != "multilingual":
        return config
    languages = {
        name: getattr(config, name) or settings.get(name)
        for name in ("source_language", "target_language")
    }
    languages = run_dir_lib.checked_languages(directory, languages, str(directory))
    return dataclasses.replace(
        config, tokenizer="multilingual", init_from=str(directory), **languages
    )


def _tokenizer_source(directory: Path) -> tuple[dict, Path]:
    """(tokenizer settings, directory of its files) of a prepared or run directory."""
    if (directory / prepared.INDEX_FILE).is_file():
        return prepared.PreparedData(directory).tokenizer_settings, directory
    if (directory / run_dir_lib.CONFIG_FILE).is_file():
        run_dir_lib.load_tokenizers(directory)  # its files are there and are its own
        return run_dir_lib.tokenizer_settings(run_dir_lib.read_config(directory)), directory
    raise ValueError(
        f"{directory} is neither a run directory ({run_dir_lib.CONFIG_FILE}) nor a prepared "
        f"data directory ({prepared.INDEX_FILE}): there is no tokenizer to take from it."
    )


def _corpus_description(config: TrainConfig) -> dict:
    names = ("corpus", "src", "tgt", "tsv", "tfds_name", "demo_pairs", "demo_languages")
    names += ("val_src", "val_tgt", "val_tsv", "val_fraction", "seed")
    return {name: getattr(config, name) for name in names}


# ----------------------------------------------------------------------------- the pairs


def _pair_streams(config: TrainConfig) -> dict[str, PairStream]:
    """Split -> a function that streams its `(source, target, held_out)` from the start.

    Held-out pairs (no validation set given: `val_fraction` of the training
    pairs, drawn by `seed`) go to the validation split; a stream can be read
    again (learning the tokenizer, then tokenizing) and holds out the same.
    """
    if config.corpus == "tfds":
        return {
            split: _from_tfds(config.tfds_name, tfds_split)
            for split, tfds_split in ((TRAIN, "train"), (VALIDATION, "validation"))
        }
    if config.corpus == "demo":
        languages = config.demo_languages.split("-")
        train_pairs = lambda: iter(  # noqa: E731
            corpora.demo_corpus(config.demo_pairs, config.seed, *languages)
        )
    elif config.corpus == "files":
        train_pairs = lambda: corpora.iter_parallel_files(config.src, config.tgt)  # noqa: E731
    else:
        train_pairs = lambda: corpora.iter_tsv(config.tsv)  # noqa: E731
    if config.val_src:
        val_pairs = lambda: corpora.iter_parallel_files(config.val_src, config.val_tgt)  # noqa: E731
    elif config.val_tsv:
        val_pairs = lambda: corpora.iter_tsv(config.val_tsv)  # noqa: E731
    else:
        return {TRAIN: _holding_out(train_pairs, config.val_fraction, config.seed)}
    return {TRAIN: _holding_out(train_pairs, 0.0, 0), VALIDATION: _holding_out(val_pairs, 0.0, 0)}


def _holding_out(pairs: Callable[[], Iterable], fraction: float, seed: int) -> PairStream:
    def stream():
        draw = random.Random(seed).random
        for source, target in pairs():
            yield source, target, bool(fraction) and draw() < fraction

    return stream


def _from_tfds(name: str, split: str) -> PairStream:
    def stream():
        dataset = corpora.load_tfds(name, split)
        for source, target in dataset.batch(CHUNK_PAIRS).as_numpy_iterator():
            for s, t in zip(source, target, strict=True):
                yield s.decode("utf-8"), t.decode("utf-8"), False

    return stream


def _learn_tokenizers(
    config: TrainConfig, settings: dict, stream: PairStream, directory: Path, sentences: int
) -> None:
    """Learns the tokenizer files from a random sample of the training sentences."""
    for filename, file_sides in sides_of_files(settings).items():
        texts = (
            pair[side] for pair in stream() if not pair[2] for side in file_sides
        )  # training sentences only: validation stays unseen
        sample = _reservoir_sample(texts, sentences, config.seed)
        learn_tokenizer_file(config, sample, directory / filename)


def _reservoir_sample(items: Iterable[str], size: int, seed: int) -> list[str]:
    """A uniform random sample of at most `size` of `items`, read once (Algorithm R)."""
    rng = random.Random(seed)
    sample: list[str] = []
    for seen, item in enumerate(items):
        if seen < size:
            sample.append(item)
        else:
            j = rng.randrange(seen + 1)
            if j < size:
                sample[j] = item
    return sample


# ----------------------------------------------------------------------------- tokenizing


def _tokenized_chunks(stream: Iterator, source_tokenizer, target_tokenizer):
    """`(held_out, ((source ids, source lengths), (target ids, target lengths)))` a chunk
    of pairs at a time, in the stream's order, tokenized in parallel by tf.data."""

    def chunks():
        while chunk := list(itertools.islice(stream, CHUNK_PAIRS)):
            sources, targets, held_out = zip(*chunk, strict=True)
            yield np.array(sources, object), np.array(targets, object), np.array(held_out)

    def tokenize(sources, targets, held_out):
        source, target = source_tokenizer.tokenize(sources), target_tokenizer.tokenize(targets)
        return held_out, (
            (source.flat_values, source.row_lengths()),
            (target.flat_values, target.row_lengths()),
        )

    strings = tf.TensorSpec([None], tf.string)
    dataset = tf.data.Dataset.from_generator(
        chunks, output_signature=(strings, strings, tf.TensorSpec([None], tf.bool))
    )
    dataset = dataset.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    yield from dataset.prefetch(tf.data.AUTOTUNE).as_numpy_iterator()


def _rows(flat: np.ndarray, lengths: np.ndarray, rows: np.ndarray):
    """The ids and lengths of the chosen `rows` of a flat, row-length-split array."""
    return flat[np.repeat(rows, lengths)], lengths[rows]


class _ShardWriter:
    """Writes one split's pairs into shards of `shard_pairs` pairs (the last one fewer)."""

    def __init__(self, directory: Path, split: str, shard_pairs: int, dtype):
        self.directory, self.split = directory, split
        self.shard_pairs, self.dtype = shard_pairs, dtype
        (directory / split).mkdir()
        self.buffer: list[tuple] = []  # ((source ids, lengths), (target ids, lengths)) chunks
        self.buffered = 0
        self.shards: list[dict] = []

    def add(self, source: tuple, target: tuple) -> None:
        self.buffer.append((source, target))
        self.buffered += len(source[1])
        while self.buffered >= self.shard_pairs:
            self._write(self.shard_pairs)

    def _write(self, pairs: int) -> None:
        """Writes the first `pairs` buffered pairs as the next shard."""
        sides = [
            (
                np.concatenate([chunk[side][0] for chunk in self.buffer]),
                np.concatenate([chunk[side][1] for chunk in self.buffer]),
            )
            for side in (0, 1)
        ]
        cuts = [int(lengths[:pairs].sum()) for _, lengths in sides]
        name = f"{self.split}/{len(self.shards):05d}"
        arrays = {
            prepared.SOURCE_IDS: sides[0][0][: cuts[0]].astype(self.dtype),
            prepared.TARGET_IDS: sides[1][0][: cuts[1]].astype(self.dtype),
            prepared.LENGTHS: np.stack([sides[0][1][:pairs], sides[1][1][:pairs]], 1).astype(
                np.int32
            ),
        }
        for array, values in arrays.items():
            np.save(prepared.shard_path(self.directory, name, array), values)
        self.shards.append(
            {"name": name, "pairs": pairs, "source_tokens": cuts[0], "target_tokens": cuts[1]}
        )
        rest = tuple((ids[cut:], lengths[pairs:]) for (ids, lengths), cut in zip(sides, cuts))
        self.buffered -= pairs
        self.buffer = [rest] if self.buffered else []

    def close(self) -> dict:
        if self.buffered:
            self._write(self.buffered)
        return {"pairs": sum(shard["pairs"] for shard in self.shards), "shards": self.shards}
