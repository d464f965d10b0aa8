"""`keras-transformer score`: an export's scores of given translations, one line a pair."""

from __future__ import annotations

import argparse
import itertools
import os
import sys

from keras_transformer.cli.common import (
    COMMANDS,
    MODEL_HELP,
    PROG,
    add_common_flags,
    add_language_flags,
    require_positive,
)
from keras_transformer.inference.loaded_export import (
    checked_languages,
    load_translator,
    score_pairs,
)
from keras_transformer.text import corpora

DEFAULT_BATCH_SIZE = 256


def add_score_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "score",
        help=COMMANDS["score"],
        description="Score each line of --tgt as a translation of the same line of --src "
        "(filtering a parallel corpus, quality estimation): one pass of the model over "
        "the given target, no search. Prints one line a pair, 'SCORE<TAB>NORMALIZED': "
        "SCORE is the log-probability of the target's tokens and its end (what translate "
        "--scores prints for the model's own translations), NORMALIZED is SCORE divided by "
        "the GNMT length penalty of the export's beam search. Sources and targets longer "
        "than the export's limits are cut there and counted in a note on stderr. The files "
        "are checked (as many lines, UTF-8) before the first score is printed, then read a "
        "batch at a time.",
    )
    parser.add_argument("--model", required=True, help=MODEL_HELP)
    parser.add_argument("--src", required=True, help="source sentences, one a line")
    parser.add_argument("--tgt", required=True, help="their translations, line-aligned")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="pairs read and sent to the model at once (default: %(default)s)",
    )
    add_language_flags(parser, "the pairs")
    add_common_flags(parser)
    parser.set_defaults(func=run_score)


def checked_line_count(path: str | os.PathLike) -> int:
    """The lines of the UTF-8 file at `path`, read as a stream; undecodable bytes raise
    ValueError naming the line."""
    count = 0
    for count, line in enumerate(corpora.iter_lines(path), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(
                f"{os.fspath(path)}: line {count} is not valid UTF-8 "
                f"({error.reason} at byte {error.start})"
            ) from None
    return count


def run_score(args: argparse.Namespace) -> int:
    require_positive(args, "batch_size")
    lines = checked_line_count(args.src), checked_line_count(args.tgt)
    if lines[0] != lines[1]:
        raise ValueError(
            f"{args.src} has {lines[0]} lines but {args.tgt} has {lines[1]}: "
            "the files must be line-aligned"
        )
    saved_model = load_translator(args.model)
    languages = checked_languages(saved_model, args.source_language, args.target_language)
    pairs = zip(corpora.iter_lines(args.src), corpora.iter_lines(args.tgt), strict=True)
    cut, first_cut = 0, []  # the count, and the first lines to name
    for start in itertools.count(0, args.batch_size):
        batch = list(itertools.islice(pairs, args.batch_size))
        if not batch:
            break
        sources, targets = zip(*batch, strict=True)
        outputs = score_pairs(saved_model, list(sources), list(targets), languages)
        sys.stdout.write(
            "".join(
                f"{score:.4f}\t{normalized:.4f}\n"
                for score, normalized in zip(
                    outputs["score"], outputs["normalized_score"], strict=True
                )
            )
        )
        sys.stdout.flush()
        truncated = outputs["source_truncated"] | outputs["target_truncated"]
        cut += int(truncated.sum())
        first_cut += [start + 1 + int(row) for row in truncated.nonzero()[0][:10]]
    if cut:
        shown = ", ".join(map(str, first_cut[:10])) + (", ..." if cut > 10 else "")
        print(
            f"{PROG}: note: {cut} of {lines[0]} pairs had a source or target longer than "
            f"the model's limits, cut there before scoring (lines {shown})",
            file=sys.stderr,
        )
    return 0
