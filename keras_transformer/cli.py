"""`keras-transformer train | translate | export | evaluate | demo`: a thin command line.

Each subcommand only parses flags and calls library functions.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="Train, export, translate with and evaluate Transformer translators.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    # Each subcommand registers itself here: add_<name>_parser(subparsers).
    add_translate_parser(subparsers)
    add_export_parser(subparsers)
    return parser


def add_translate_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "translate",
        help="Translate sentences with an exported SavedModel.",
        description="Translate the given sentences, or stdin one sentence a line, in batches. "
        "Prints one translation a line (with --scores: score, a tab, translation).",
    )
    parser.add_argument(
        "--model",
        required=True,
        help="SavedModel: saved_models/NAME (latest version) or saved_models/NAME/VERSION",
    )
    parser.add_argument("texts", nargs="*", help="sentences; read from stdin when none")
    parser.add_argument("--beam", type=int, default=None, metavar="N", help="beam search width")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--scores", action="store_true", help="print log-probabilities too")
    parser.set_defaults(func=run_translate)


def run_translate(args: argparse.Namespace) -> int:
    from keras_transformer.export import load_translator, translate_texts

    if args.beam is not None and args.beam <= 0:
        raise SystemExit(f"--beam must be a positive integer, got {args.beam}")
    if args.batch_size <= 0:
        raise SystemExit(f"--batch-size must be a positive integer, got {args.batch_size}")
    if args.texts:
        # Undecodable bytes in arguments arrive as surrogates: pass the bytes on.
        texts = [t.encode("utf-8", errors="surrogateescape") for t in args.texts]
    else:
        # Raw bytes: undecodable input must not stop the run (the model replaces it).
        texts = sys.stdin.buffer.read().splitlines()
    saved_model = load_translator(args.model)
    results = translate_texts(
        saved_model,
        texts,
        beam_width=args.beam,
        batch_size=args.batch_size,
    )
    for translation, score in results:
        print(f"{score:.4f}\t{translation}" if args.scores else translation)
    return 0


def add_export_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="Export a training run as a SavedModel for TF Serving.",
        description="Write RUN_DIR's best checkpoint with its tokenizers to "
        "EXPORT_ROOT/NAME/VERSION/ (TF Serving layout).",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--name", required=True, help="model name under the export root")
    parser.add_argument("--export-root", default="saved_models")
    parser.add_argument("--version", type=int, default=None, help="default: the next free one")
    parser.add_argument("--max-length", type=int, default=None, help="most generated tokens")
    parser.add_argument("--beam-width", type=int, default=4, help="width of beam_search")
    parser.add_argument("--length-penalty", type=float, default=0.6, help="GNMT alpha")
    parser.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    from keras_transformer.export import export_run

    path = export_run(
        args.run_dir,
        args.export_root,
        args.name,
        args.version,
        max_length=args.max_length,
        beam_width=args.beam_width,
        length_penalty_alpha=args.length_penalty,
    )
    print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
