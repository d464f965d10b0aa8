"""Prepared data: token ids written once by `prepare`, read by any run in seconds.

A prepared directory (written by `keras_transformer.training.prepare`, whole or not at
all) holds:

    DIR/index.json                 what is where: the splits, their shards and pair
                                   counts, the tokenizer's settings, vocabulary sizes
                                   and the SHA-256 of its files
    DIR/spm_joint.model            the tokenizer files, named as in a run directory
    DIR/train/00000.source.npy     a shard's source ids, one flat array ([START] ... [END]
                                   per pair, one pair after the other)
    DIR/train/00000.target.npy     its target ids, likewise
    DIR/train/00000.lengths.npy    (pairs, 2) int32: each pair's source and target length
    DIR/validation/...             the validation split's shards, alike

Everything here is numpy and the standard library (and Keras' `PyDataset`): a
machine with JAX or PyTorch and no TensorFlow trains from prepared data. The
ids are read from the shards as batches need them, so a run holds only the
per-pair lengths and offsets in memory (about 26 bytes a pair), and knows the
batches of an epoch from the lengths alone, without a pass over the ids.

The module reads a prepared directory for training, from its checked index
(`read_index`) to the batches `fit` takes: the directory (`PreparedData`), its shard
files (`_IdFile`, read with `os.pread` through a bounded set of open files), a
split's pairs (`PreparedSplit`) and the batches (`PreparedBatches`). It is one
module because each class reads the one below it (batches from a split, a split from
the directory's shards), and together they are the directory's reader; writing one is
`training/prepare.py`'s.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import weakref
from pathlib import Path

import keras
import numpy as np

from keras_transformer.constants import PAD_ID
from keras_transformer.text import buckets

INDEX_FILE = "index.json"
FORMAT = "keras_transformer.text.prepared/1"
SPLITS = ("train", "validation")
# A shard's three arrays: file name ending -> what it holds.
SOURCE_IDS, TARGET_IDS, LENGTHS = "source.npy", "target.npy", "lengths.npy"
# The tokenizer settings a prepared directory records (its index's "tokenizer"): a run from
# it takes them (`training.config.with_prepared_tokenizer`).
TOKENIZER_KEYS = (
    "kind",
    "shared_vocab",
    "lower_case",
    "normalization_form",
    "subword_model",
    "vocab_size",
    "source_language",
    "target_language",
)


def file_sha256(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def shard_path(directory: str | os.PathLike, shard: str, array: str) -> Path:
    """The file of one of a shard's arrays (`SOURCE_IDS`, `TARGET_IDS`, `LENGTHS`)."""
    return Path(directory) / f"{shard}.{array}"


def read_index(directory: str | os.PathLike) -> dict:
    """The index of a prepared directory, read alone (`PreparedData` checks the rest);
    refused with a one-line ValueError naming the directory, as `PreparedData` is."""
    directory = Path(directory)
    index_path = directory / INDEX_FILE
    if not index_path.is_file():
        why = (
            "it does not exist"
            if not directory.exists()
            else f"it has no {INDEX_FILE} (an interrupted prepare writes none: run it again)"
        )
        raise ValueError(f"{directory} is not a prepared data directory: {why}.")
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"{index_path} is not valid JSON: {error}") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError(
            f"{index_path} is not an index of this version's prepared data (format "
            f"{FORMAT!r}): prepare the corpus again."
        )
    return index


class PreparedData:
    """A prepared directory, checked whole before anything reads it.

    Refused with a one-line ValueError naming the directory: no index (an
    interrupted `prepare` never writes one), another format, shards whose
    files or counts are not the index's, tokenizer files whose SHA-256 is not
    the index's.

    Args:
        directory: what `prepare` wrote.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        index = read_index(self.directory)
        self.index = index
        self.tokenizer_settings: dict = index["tokenizer"]
        self.files: dict[str, str] = index["files"]
        self.vocab_sizes: tuple[int, int] = tuple(index["vocab_sizes"])
        for name, fingerprint in self.files.items():
            path = self.directory / name
            if not path.is_file() or file_sha256(path) != fingerprint:
                raise ValueError(
                    f"{path} is not the tokenizer {self.directory} was prepared with (missing, "
                    f"or its SHA-256 differs from {INDEX_FILE}'s): prepare the corpus again."
                )
        for split in SPLITS:
            self._check_split(split)

    def pairs(self, split: str = "train") -> int:
        """The number of pairs in `split`."""
        return int(self.index["splits"][split]["pairs"])

    def shards(self, split: str = "train") -> list[dict]:
        """The index's entries of `split`'s shards: {"name", "pairs", "source_tokens", ...}."""
        return list(self.index["splits"][split]["shards"])

    def _check_split(self, split: str) -> None:
        """The shards' files hold what the index says: pairs, and ids for every length."""
        shards = self.shards(split)
        if sum(shard["pairs"] for shard in shards) != self.pairs(split):
            raise ValueError(
                f"{self.directory / INDEX_FILE}: the {split} shards' pair counts do not add up "
                f"to the split's {self.pairs(split)}: prepare the corpus again."
            )
        for shard in shards:
            lengths = self._load(shard["name"], LENGTHS)
            sizes = [self._load(shard["name"], array).size for array in (SOURCE_IDS, TARGET_IDS)]
            expected = (shard["pairs"], shard["source_tokens"], shard["target_tokens"])
            found = (len(lengths), *sizes)
            totals = (len(lengths), int(lengths[:, 0].sum()), int(lengths[:, 1].sum()))
            if found != expected or totals != expected:
                raise ValueError(
                    f"{shard_path(self.directory, shard['name'], LENGTHS)}: the shard holds "
                    f"{found[0]} pairs and {found[1]}+{found[2]} ids where {INDEX_FILE} says "
                    f"{expected[0]} and {expected[1]}+{expected[2]}: prepare the corpus again."
                )

    def _load(self, shard: str, array: str) -> np.ndarray:
        path = shard_path(self.directory, shard, array)
        try:
            return np.load(path, mmap_mode="r")
        except (OSError, ValueError) as error:
            raise ValueError(
                f"{path} cannot be read as a shard of {self.directory} ({error}): prepare the "
                "corpus again."
            ) from None

    def check_tokenizer_files(self, fingerprints: dict[str, str], where: str) -> None:
        """`fingerprints` (a run's tokenizer files, name -> SHA-256) are this data's."""
        for name, fingerprint in fingerprints.items():
            if self.files.get(name) != fingerprint:
                raise ValueError(
                    f"{self.directory} was prepared with another tokenizer than {where} holds "
                    f"({name} differs): train from data prepared with that tokenizer "
                    "(prepare --tokenizer-from), or in a new run directory."
                )

    def split(self, split: str = "train", worker: int = 0, workers: int = 1) -> PreparedSplit:
        """The pairs of `split` that worker `worker` of `workers` reads: every
        `workers`-th shard from its own, disjoint from the other workers'."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}. Received: split={split!r}")
        shards = self.shards(split)
        if not 0 <= worker < workers:
            raise ValueError(f"worker must be in [0, {workers}). Received: worker={worker}")
        if workers > len(shards):
            raise ValueError(
                f"{self.directory}'s {split} split has {len(shards)} shards, too few for "
                f"{workers} workers to read disjoint ones: prepare it with smaller shards "
                "(--shard-pairs)."
            )
        names = [shard["name"] for shard in shards[worker::workers]]
        files = _OpenFiles()
        return PreparedSplit(
            [_IdFile(shard_path(self.directory, name, SOURCE_IDS), files) for name in names],
            [_IdFile(shard_path(self.directory, name, TARGET_IDS), files) for name in names],
            [np.asarray(self._load(name, LENGTHS)) for name in names],
        )


class _OpenFiles:
    """File descriptors kept open for reading, at most `limit` at a time (the least
    recently used one is closed first), so that a corpus of many shards stays within the
    process' limit of open files."""

    def __init__(self, limit: int = 256):
        self.limit = limit
        self.open: collections.OrderedDict[Path, int] = collections.OrderedDict()
        # Closed when this object goes, or when the interpreter exits.
        weakref.finalize(self, _close_all, self.open)

    def descriptor(self, path: Path) -> int:
        if path in self.open:
            self.open.move_to_end(path)
            return self.open[path]
        if len(self.open) >= self.limit:
            os.close(self.open.popitem(last=False)[1])
        self.open[path] = os.open(path, os.O_RDONLY)
        return self.open[path]


def _close_all(descriptors: dict) -> None:
    for descriptor in descriptors.values():
        os.close(descriptor)
    descriptors.clear()


class _IdFile:
    """A shard's flat ids, read a slice at a time with `os.pread`.

    Not memory-mapped: the pages a mapping touches stay in the process' resident memory,
    which would grow toward the corpus' size over an epoch of random reads; read this way,
    they stay in the system's file cache alone.
    """

    def __init__(self, path: Path, files: _OpenFiles):
        header = np.load(path, mmap_mode="r")  # the .npy header: dtype and where data starts
        self.path, self.files = path, files
        self.dtype, self.offset, self.size = header.dtype, header.offset, header.size
        del header

    def read(self, start: int, length: int) -> np.ndarray:
        itemsize = self.dtype.itemsize
        data = os.pread(
            self.files.descriptor(self.path),
            int(length) * itemsize,
            self.offset + int(start) * itemsize,
        )
        return np.frombuffer(data, self.dtype)


def _index_dtype(largest: int):
    """The smallest of uint16, int32 and int64 that holds 0..largest."""
    if largest <= np.iinfo(np.uint16).max:
        return np.uint16
    return np.int32 if largest <= np.iinfo(np.int32).max else np.int64


def _concatenate(arrays: list, dtype) -> np.ndarray:
    """One array of `dtype` from `arrays`, converted one by one (no wider copy of the whole)."""
    out = np.empty(sum(len(a) for a in arrays), dtype)
    offset = 0
    for a in arrays:
        out[offset : offset + len(a)] = a
        offset += len(a)
    return out


class PreparedSplit:
    """The pairs of some shards: their ids (read as needed) and where each pair's are.

    Args:
        sources, targets: each shard's flat ids (`_IdFile`).
        lengths: each shard's (pairs, 2) source and target lengths.
    """

    def __init__(self, sources: list, targets: list, lengths: list):
        self.sources, self.targets = sources, targets
        # Per pair, in memory: its lengths, shard and starts there (18 bytes a pair).
        self.source_lengths = _concatenate([x[:, 0] for x in lengths], np.int32)
        self.target_lengths = _concatenate([x[:, 1] for x in lengths], np.int32)
        self.shard_of = _concatenate(
            [np.full(len(x), shard) for shard, x in enumerate(lengths)], _index_dtype(len(lengths))
        )
        # Where a pair's ids start in its shard: the lengths before it there.
        self.source_starts, self.target_starts = (
            _concatenate(
                [np.cumsum(x[:, side], dtype=np.int64) - x[:, side] for x in lengths],
                _index_dtype(max((int(x[:, side].sum()) for x in lengths), default=0)),
            )
            for side in (0, 1)
        )

    def __len__(self) -> int:
        return len(self.source_lengths)

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Pair `i`'s (source, target) ids, [START] and [END] included."""
        shard = self.shard_of[i]
        s, t = self.source_starts[i], self.target_starts[i]
        return (
            self.sources[shard].read(s, self.source_lengths[i]),
            self.targets[shard].read(t, self.target_lengths[i]),
        )


class PreparedBatches(keras.utils.PyDataset):
    """Batches of `((context, target_in), target_out)` from prepared pairs, for `fit`.

    The batches of `data.make_batches` (the text pipeline), from the shards'
    ids and numpy alone, so on every Keras backend: int32, padded with 0,
    grouped by length into the same buckets (`buckets`), `batch_size` pairs a
    batch or `batch_tokens // L` for a bucket padded to length L. Every epoch
    holds every pair exactly once (drop: every pair that fits), in a new
    shuffle when `shuffle` (seeded by `seed` and the epoch), and its number
    of batches is known from the lengths alone.

    Args:
        pairs: a `PreparedSplit`.
        batch_size, max_tokens, batch_tokens, overlong: as `make_batches`.
        shuffle: shuffle the pairs, and the batches, every epoch.
        seed: the shuffles' seed.
        repeat: batches without end, epoch after epoch (`fit` with
            `steps_per_epoch`).
        num_batches: cut every epoch to this many batches (workers of one
            synchronous run must take equally many steps).
    """

    def __init__(
        self,
        pairs: PreparedSplit,
        batch_size: int = 64,
        max_tokens: int = 128,
        batch_tokens: int | None = None,
        overlong: str = "truncate",
        shuffle: bool = True,
        seed: int = 0,
        repeat: bool = False,
        num_batches: int | None = None,
    ):
        super().__init__()
        if overlong not in ("truncate", "drop"):
            raise ValueError(f"overlong must be 'truncate' or 'drop'. Received: {overlong!r}")
        if max_tokens < 2:
            raise ValueError(f"max_tokens must be at least 2. Received: max_tokens={max_tokens}")
        self.pairs, self.max_tokens, self.shuffle, self.seed = pairs, max_tokens, shuffle, seed
        self.repeat = repeat
        self.padded_lengths = buckets.bucket_boundaries(max_tokens)
        sizes = buckets.bucket_batch_sizes(max_tokens, batch_size, batch_tokens)
        self.batch_sizes = np.array(sizes)
        lengths = buckets.pair_lengths(pairs.source_lengths, pairs.target_lengths, max_tokens)
        bucket = buckets.bucket_of(lengths, max_tokens).astype(np.uint8)
        del lengths
        if overlong == "drop":  # a bucket past the last holds no pair
            fits = buckets.fits(pairs.source_lengths, pairs.target_lengths, max_tokens)
            bucket[~fits] = len(self.batch_sizes)
        # Each bucket's pairs (32 bits an index where they fit): an epoch shuffles each.
        order = np.argsort(bucket, kind="stable").astype(_index_dtype(len(pairs) - 1))
        counts = np.bincount(bucket, minlength=len(self.batch_sizes) + 1)[: len(self.batch_sizes)]
        del bucket
        ends = np.cumsum(counts)
        self.groups = [order[end - count : end] for count, end in zip(counts, ends, strict=True)]
        if not counts.sum():
            raise ValueError("No sentence pairs to batch (none fits max_tokens, or none given).")
        self.epoch_batches = int(np.sum(-(-counts // self.batch_sizes)))
        if num_batches is not None:
            self.epoch_batches = min(self.epoch_batches, num_batches)
        self.epoch = 0
        self._planned = (None, None)  # (epoch, its plan)

    @property
    def num_batches(self) -> int | None:
        return None if self.repeat else self.epoch_batches

    def __len__(self) -> int:
        return self.epoch_batches

    def on_epoch_end(self) -> None:
        if not self.repeat:  # a repeating stream counts its epochs by the batch index
            self.epoch += 1

    def _plan(self, epoch: int):
        """(each bucket's pairs in the epoch's order, the epoch's batches as (bucket,
        start, stop) rows into them)."""
        if self._planned[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            groups = [rng.permutation(g) if self.shuffle else g for g in self.groups]
            batches = np.concatenate(
                [
                    np.stack(
                        [
                            np.full(len(starts), b),
                            starts,
                            np.minimum(starts + size, len(group)),
                        ],
                        axis=1,
                    )
                    for b, (group, size) in enumerate(zip(groups, self.batch_sizes, strict=True))
                    for starts in [np.arange(0, len(group), size)]
                ]
            )
            if self.shuffle:
                batches = batches[rng.permutation(len(batches))]
            self._planned = (epoch, (groups, batches[: self.epoch_batches]))
        return self._planned[1]

    def __getitem__(self, index: int):
        if index < 0 or (not self.repeat and index >= self.epoch_batches):
            raise IndexError(f"batch {index} of {self.epoch_batches}")
        if self.repeat:
            return self.batch_of(*divmod(index, self.epoch_batches))
        return self.batch_of(self.epoch, index)

    def batch_of(self, epoch: int, position: int):
        """Batch `position` of epoch `epoch` (counted from 0)."""
        groups, batches = self._plan(epoch)
        bucket, start, stop = batches[position]
        return self.batch(groups[bucket][start:stop], self.padded_lengths[bucket])

    def batch(self, rows: np.ndarray, length: int):
        """Pairs `rows` as one batch padded to `length`."""
        context = np.full((len(rows), length), PAD_ID, np.int32)
        target_in = np.full((len(rows), length), PAD_ID, np.int32)
        target_out = np.full((len(rows), length), PAD_ID, np.int32)
        for r, i in enumerate(rows):
            source, target = self.pairs.pair(i)
            source, target = source[: self.max_tokens], target[: self.max_tokens + 1]
            context[r, : len(source)] = source
            target_in[r, : len(target) - 1] = target[:-1]
            target_out[r, : len(target) - 1] = target[1:]
        return (context, target_in), target_out
