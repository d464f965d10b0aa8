"""Corpora: `(source, target)` string pairs, and the split a run validates on.

Pairs come from one of:
- `demo_corpus`: numbers written as words in two languages (num2words), built
  here, offline and deterministic; a small model learns it in minutes.
- `read_parallel_files` / `read_tsv`: line-aligned text files or a TSV file,
  read strictly (misaligned files are an error; bad lines are counted skips).
- `load_tfds`: tensorflow-datasets (`ted_hrlr_translate/pt_to_en`, as in the
  TensorFlow tutorial); needs the internet the first time.

`load_corpus` is the one entry point `train()` uses: the config's corpus
choice, then its validation set or `split_pairs`. The `data` module batches
what these return.
"""

from __future__ import annotations

import codecs
import logging
import os
import random
import socket
from collections.abc import Iterable, Iterator, Sequence

import tensorflow as tf
from num2words import CONVERTER_CLASSES, num2words

logger = logging.getLogger(__name__)

Pair = tuple[str, str]

TFDS_TED = "ted_hrlr_translate/pt_to_en"


# ----------------------------------------------------------------------------- demo corpus


def demo_corpus(
    num_pairs: int = 20000, seed: int = 0, source_lang: str = "en", target_lang: str = "pt"
) -> list[Pair]:
    """`num_pairs` distinct numbers below one million written out in two languages.

    Each is a sentence, capitalized and ending in a full stop, so that the demo
    shows cased, punctuated output: ("One hundred and one thousand and one.",
    "Cento e um mil e um."). The number of digits is drawn uniformly from 1 to
    6, so short and long numbers are equally common. The same arguments always
    give the same list.

    Args:
        num_pairs: how many pairs (at most 1,000,000).
        seed: random seed.
        source_lang, target_lang: num2words language codes ("en", "pt", "de", ...).
    """
    if not 0 < num_pairs <= 1_000_000:
        raise ValueError(f"num_pairs must be in 1..1000000. Received: num_pairs={num_pairs}")
    for lang in (source_lang, target_lang):
        try:
            num2words(1, lang=lang)
        except NotImplementedError:
            known = ", ".join(sorted(CONVERTER_CLASSES))
            raise ValueError(f"num2words has no language {lang!r}. Known: {known}.") from None
    rng = random.Random(seed)
    seen: set[int] = set()
    numbers: list[int] = []
    while len(numbers) < num_pairs:
        digits = rng.randint(1, 6)
        n = rng.randrange(0 if digits == 1 else 10 ** (digits - 1), 10**digits)
        if n not in seen:
            seen.add(n)
            numbers.append(n)
    return [
        (_as_sentence(num2words(n, lang=source_lang)), _as_sentence(num2words(n, lang=target_lang)))
        for n in numbers
    ]


def _as_sentence(words: str) -> str:
    return words[:1].upper() + words[1:] + "."


# ----------------------------------------------------------------------------- text files


def split_lines(data: bytes) -> list[bytes]:
    """The lines of `data`, as every reader of line-aligned text here splits them.

    Split on "\n" only: bytes/str.splitlines (and text-mode files) would also
    split on U+2028, U+0085, form feeds, a "\r" inside a line, ... and
    silently shift every later line against its partner. A "\r" ending a line
    (CRLF endings) is dropped; one inside a line is whitespace to the
    tokenizers. A UTF-8 byte-order mark (Windows editors write one) is no part
    of the first line.
    """
    lines = data.removeprefix(codecs.BOM_UTF8).split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def iter_lines(path: str | os.PathLike) -> Iterator[bytes]:
    """The lines of a file as `split_lines` splits them, read as a stream (memory flat
    in the file's size)."""
    with open(path, "rb") as f:
        first = True
        for line in f:  # a binary file splits on b"\n" alone
            if first:
                line, first = line.removeprefix(codecs.BOM_UTF8), False
            line = line[:-1] if line.endswith(b"\n") else line
            yield line[:-1] if line.endswith(b"\r") else line


def count_lines(path: str | os.PathLike) -> int:
    """The number of lines `iter_lines` gives, counted without decoding them."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


class _Skips:
    """Counts skipped lines by reason, for one report at the end."""

    def __init__(self, where: str, on_error: str):
        if on_error not in ("skip", "raise"):
            raise ValueError(f"on_error must be 'skip' or 'raise'. Received: {on_error!r}")
        self.where = where
        self.on_error = on_error
        self.lines: dict[str, list[int]] = {}

    def add(self, reason: str, line_number: int) -> None:
        if self.on_error == "raise":
            raise ValueError(f"{self.where}: line {line_number}: {reason}.")
        self.lines.setdefault(reason, []).append(line_number)

    def report(self, total: int) -> None:
        if not self.lines:
            return
        skipped = sum(len(v) for v in self.lines.values())
        parts = [
            f"{len(v)} {reason} (line{'s' if len(v) > 1 else ''} "
            f"{', '.join(map(str, v[:5]))}{', ...' if len(v) > 5 else ''})"
            for reason, v in self.lines.items()
        ]
        logger.warning(
            "%s: skipped %d of %d lines: %s", self.where, skipped, total, "; ".join(parts)
        )


def _decode(line: bytes, skips: _Skips, what: str, line_number: int) -> str | None:
    if b"\0" in line:  # binary data, not text
        skips.add(f"NUL bytes in {what}", line_number)
        return None
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError:
        skips.add(f"undecodable UTF-8 in {what}", line_number)
        return None
    if not text:
        skips.add(f"empty {what}", line_number)
        return None
    return text


def _check_not_empty(pairs: int, where: str, lines: int) -> None:
    if not pairs:
        reason = f"all {lines} lines were skipped" if lines else "no lines"
        raise ValueError(f"{where}: no sentence pairs ({reason}).")


def read_parallel_files(
    src_path: str | os.PathLike, tgt_path: str | os.PathLike, on_error: str = "skip"
) -> list[Pair]:
    """Line-aligned parallel files -> `(source, target)` pairs.

    Files with different line counts raise ValueError naming both files and
    counts, and so do files without a single pair. A line pair where either
    side is empty, holds NUL bytes or is not valid UTF-8 is dropped as a pair
    (so the alignment is kept) and the drops are reported with their line
    numbers in one warning; `on_error="raise"` raises instead. Lines end at
    "\n" alone; CRLF endings, a byte-order mark and a last line without "\n"
    are read as expected.
    """
    return list(iter_parallel_files(src_path, tgt_path, on_error))


def iter_parallel_files(
    src_path: str | os.PathLike, tgt_path: str | os.PathLike, on_error: str = "skip"
) -> Iterator[Pair]:
    """`read_parallel_files` as a stream: the pairs one by one, memory flat in the files'
    size. The line counts are compared before the first pair; the skips are reported,
    and a corpus without a pair refused, after the last."""
    lines = count_lines(src_path), count_lines(tgt_path)
    if lines[0] != lines[1]:
        raise ValueError(
            f"Parallel files are not line-aligned: {os.fspath(src_path)} has "
            f"{lines[0]} lines but {os.fspath(tgt_path)} has {lines[1]} lines."
        )
    skips = _Skips(f"{os.fspath(src_path)} / {os.fspath(tgt_path)}", on_error)
    pairs = 0
    for i, (s, t) in enumerate(zip(iter_lines(src_path), iter_lines(tgt_path)), start=1):
        source = _decode(s, skips, "source", i)
        target = _decode(t, skips, "target", i) if source is not None else None
        if source is not None and target is not None:
            pairs += 1
            yield source, target
    skips.report(lines[0])
    _check_not_empty(pairs, skips.where, lines[0])


def read_tsv(path: str | os.PathLike, on_error: str = "skip") -> list[Pair]:
    """A `source<TAB>target` file -> pairs.

    Lines without exactly one tab, with an empty side, NUL bytes or invalid
    UTF-8 are skipped and reported in one warning (or raise with
    `on_error="raise"`); a file without a single pair raises ValueError.
    """
    return list(iter_tsv(path, on_error))


def iter_tsv(path: str | os.PathLike, on_error: str = "skip") -> Iterator[Pair]:
    """`read_tsv` as a stream, as `iter_parallel_files` is `read_parallel_files`'s."""
    skips = _Skips(os.fspath(path), on_error)
    pairs = lines = 0
    for lines, line in enumerate(iter_lines(path), start=1):
        fields = line.split(b"\t")
        if len(fields) != 2:
            skips.add(f"lines with {len(fields)} tab-separated fields instead of 2", lines)
            continue
        source = _decode(fields[0], skips, "source", lines)
        target = _decode(fields[1], skips, "target", lines) if source is not None else None
        if source is not None and target is not None:
            pairs += 1
            yield source, target
    skips.report(lines)
    _check_not_empty(pairs, skips.where, lines)


# ----------------------------------------------------------------------------- tfds


def _can_reach(host: str, port: int = 443, timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def load_tfds(
    name: str = TFDS_TED, split: str = "train", data_dir: str | None = None
) -> tf.data.Dataset:
    """A tensorflow-datasets translation corpus as a dataset of `(source, target)` strings.

    Downloads and prepares it the first time (needs the internet). Offline,
    and with no prepared copy in `data_dir`, it fails at once rather than
    retrying downloads for minutes.
    """
    # Imported here: tensorflow-datasets takes seconds to import and only this loader needs it.
    import tensorflow_datasets as tfds

    builder = tfds.builder(name, data_dir=data_dir)
    if not builder.is_prepared():
        if not _can_reach("storage.googleapis.com") and not _can_reach("github.com"):
            raise ConnectionError(
                f"tensorflow-datasets '{name}' is not prepared in {builder.data_dir} and "
                "there is no internet connection to download it. Train from local files "
                "instead: `keras-transformer train --src train.pt --tgt train.en "
                "--val-src dev.pt --val-tgt dev.en` (line-aligned text files) or --tsv FILE."
            )
        builder.download_and_prepare()
    return builder.as_dataset(split=split, as_supervised=True)


def split_pairs(pairs: Sequence[Pair], fraction: float, seed: int = 0) -> tuple[list, list]:
    """(train, validation) split of `pairs`, `fraction` of them held out, deterministic."""
    pairs = list(pairs)
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    held = max(1, int(round(len(pairs) * fraction)))
    if held >= len(pairs):
        raise ValueError(f"Cannot hold out {fraction:.0%} of only {len(pairs)} pairs.")
    val = [pairs[i] for i in sorted(order[:held])]
    train = [pairs[i] for i in sorted(order[held:])]
    return train, val


def texts(pairs: Iterable[Pair] | tf.data.Dataset, side: int) -> list[str] | tf.data.Dataset:
    """One side (0: source, 1: target) of `pairs`: strings, or a dataset of them."""
    if isinstance(pairs, tf.data.Dataset):
        return pairs.map(lambda *pair: pair[side])
    return [pair[side] for pair in pairs]


# ----------------------------------------------------------------------------- a run's corpus


def load_corpus(config) -> tuple[object, object]:
    """(train, validation) pairs of a training run: lists, or string datasets for tfds.

    `config` is the run's `TrainConfig` (its corpus settings are read, by name: text
    sits below the training run and does not import it).
    """
    if config.corpus == "tfds":
        return load_tfds(config.tfds_name, "train"), load_tfds(config.tfds_name, "validation")
    if config.corpus == "demo":
        languages = config.demo_languages.split("-")
        if len(languages) != 2:
            raise ValueError(
                "demo_languages must be two num2words language codes joined by '-', such as "
                f"'en-pt'. Received: demo_languages={config.demo_languages!r}"
            )
        source_lang, target_lang = languages
        pairs = demo_corpus(config.demo_pairs, config.seed, source_lang, target_lang)
    elif config.corpus == "files":
        pairs = read_parallel_files(config.src, config.tgt)
    else:
        pairs = read_tsv(config.tsv)
    if config.val_src:
        return pairs, read_parallel_files(config.val_src, config.val_tgt)
    if config.val_tsv:
        return pairs, read_tsv(config.val_tsv)
    return split_pairs(pairs, config.val_fraction, config.seed)
