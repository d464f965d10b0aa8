"""`keras-transformer translate`: an export's translations of sentences, n-best lists, or
translations continuing given prefixes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from keras_transformer.cli.common import (
    COMMANDS,
    MODEL_HELP,
    PROG,
    UserError,
    add_common_flags,
    add_language_flags,
    add_search_flags,
    require_positive,
)
from keras_transformer.inference.loaded_export import (
    checked_languages,
    load_translator,
    signature_of,
    translate_nbest_rows,
    translate_prefixed_rows,
    translate_rows,
)
from keras_transformer.text import corpora


def add_translate_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "translate",
        help=COMMANDS["translate"],
        description="Translate the given sentences, or stdin one sentence a line, in batches. "
        "Prints one translation a line (with --scores: score, a tab, translation); with "
        "--n-best K, K lines a sentence: its row number (from 1), a tab, the score, a tab, "
        "the translation, best first.",
    )
    parser.add_argument("--model", required=True, help=MODEL_HELP)
    parser.add_argument(
        "texts", nargs="*", help="sentences to translate (default: stdin, one a line)"
    )
    add_search_flags(parser)
    parser.add_argument(
        "--scores", action="store_true", help="print each translation's log-probability too"
    )
    parser.add_argument(
        "--n-best",
        type=int,
        default=None,
        metavar="K",
        help="print each sentence's K best translations by beam search (of width --beam, or "
        "the export's), one a line as ROW<TAB>SCORE<TAB>TRANSLATION, ROW counting from 1 "
        "(default: the best one)",
    )
    parser.add_argument(
        "--prefix",
        default=None,
        metavar="FILE",
        help="FILE holds one target-side prefix a sentence, line-aligned with them (an empty "
        "line for none): each translation starts with its prefix and continues from it "
        "(default: no prefix)",
    )
    add_language_flags(parser, "the sentences")
    add_common_flags(parser)
    parser.set_defaults(func=run_translate)


def run_translate(args: argparse.Namespace) -> int:

    require_positive(args, "beam", "batch_size", "n_best")
    if args.n_best is not None and args.prefix is not None:
        raise UserError("--n-best and --prefix do not go together: give one of them")
    if args.n_best is not None and args.beam is not None and args.n_best > args.beam:
        raise UserError(f"--n-best {args.n_best} is above the beam width (--beam {args.beam})")
    if args.texts:
        # Undecodable bytes in arguments arrive as surrogates: pass the bytes on.
        texts = [t.encode("utf-8", errors="surrogateescape") for t in args.texts]
    else:
        # Raw bytes: undecodable input must not stop the run (the model replaces it).
        texts = corpora.split_lines(sys.stdin.buffer.read())
    prefixes = None
    if args.prefix is not None:
        prefixes = corpora.split_lines(Path(args.prefix).read_bytes())
        if len(prefixes) != len(texts):
            raise UserError(
                f"--prefix {args.prefix} has {len(prefixes)} lines for {len(texts)} sentences"
            )
    saved_model = load_translator(args.model)
    languages = checked_languages(saved_model, args.source_language, args.target_language)
    if args.n_best is not None:
        return _print_nbest(saved_model, texts, args, languages)
    search = dict(beam_width=args.beam, batch_size=args.batch_size, languages=languages)
    if prefixes is None:
        results = translate_rows(saved_model, texts, **search)
    else:
        results = translate_prefixed_rows(saved_model, texts, prefixes, **search)
    for translation, score, *_ in results:
        print(f"{score:.4f}\t{translation}" if args.scores else translation)
    _note_cut_sources([row[2] for row in results])
    if prefixes is not None:
        _note_cut(
            [row[3] for row in results],
            "prefixes were longer than the model's longest translation less one token",
        )
    return 0


def _print_nbest(saved_model, texts: list[bytes], args: argparse.Namespace, languages) -> int:
    """`--n-best K`: K lines a sentence, ROW<TAB>SCORE<TAB>TRANSLATION, best first."""
    if args.beam is None:
        signature_of(saved_model, "nbest")  # refused before its limits: older exports lack both
        width = int(saved_model.serving_limits()["beam_width"])
        if args.n_best > width:
            raise UserError(
                f"--n-best {args.n_best} is above the export's beam width ({width}): "
                "give --beam N with N >= K"
            )
    results = translate_nbest_rows(
        saved_model,
        texts,
        args.n_best,
        beam_width=args.beam,
        batch_size=args.batch_size,
        languages=languages,
    )
    for row, (hypotheses, _) in enumerate(results, 1):
        for translation, score in hypotheses:
            print(f"{row}\t{score:.4f}\t{translation}")
    _note_cut_sources([truncated for _, truncated in results])
    return 0


def _note_cut_sources(truncated: list[bool]) -> None:
    """Nothing is cut silently: the translation of a cut source lacks its end."""
    _note_cut(truncated, "sources were longer than the model's source limit")


def _note_cut(truncated: list[bool], what: str) -> None:
    """One note on stderr naming the rows flagged in `truncated`, if any: `what` (of
    those rows) was cut before translating."""
    cut = [number for number, flag in enumerate(truncated, 1) if flag]
    if cut:
        shown = ", ".join(map(str, cut[:10])) + (", ..." if len(cut) > 10 else "")
        print(
            f"{PROG}: note: {len(cut)} of {len(truncated)} {what} and were cut there "
            f"before translating (rows {shown})",
            file=sys.stderr,
        )
