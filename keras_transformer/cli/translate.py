"""`keras-transformer translate`, `export` and `evaluate`: what works with an export."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

from sacrebleu.metrics import bleu

from keras_transformer.cli.common import (
    BEAM_HELP,
    COMMANDS,
    MODEL_HELP,
    PROG,
    UserError,
    add_common_flags,
    require_positive,
)
from keras_transformer.evaluation import DEFAULT_TOKENIZE, evaluate, summary_line
from keras_transformer.inference.export import (
    DEFAULT_EXPORT_ROOT,
    export_run,
    load_translator,
    translate_nbest_rows,
    translate_prefixed_rows,
    translate_rows,
)
from keras_transformer.inference.translator import (
    DEFAULT_MAX_LENGTH,
    DEFAULT_MAX_SOURCE_LENGTH,
    Translator,
)
from keras_transformer.text import corpora
from keras_transformer.training.run_dir import BEST_CHECKPOINT, CONFIG_FILE


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
    parser.add_argument("--beam", type=int, default=None, metavar="N", help=BEAM_HELP)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="sentences per call of the model (default: %(default)s)",
    )
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
    if args.n_best is not None:
        return _print_nbest(saved_model, texts, args)
    if prefixes is None:
        results = translate_rows(
            saved_model, texts, beam_width=args.beam, batch_size=args.batch_size
        )
    else:
        _require(saved_model, "translate_with_prefix", "--prefix")
        results = translate_prefixed_rows(
            saved_model, texts, prefixes, beam_width=args.beam, batch_size=args.batch_size
        )
    for translation, score, *_ in results:
        print(f"{score:.4f}\t{translation}" if args.scores else translation)
    _note_cut_sources([row[2] for row in results])
    if prefixes is not None:
        _note_cut(
            [row[3] for row in results],
            "prefixes were longer than the model's longest translation less one token",
        )
    return 0


def _require(saved_model, function: str, flag: str) -> None:
    if not hasattr(saved_model, function):
        raise UserError(f"this export predates {flag}: export the run again to use it")


def _print_nbest(saved_model, texts: list[bytes], args: argparse.Namespace) -> int:
    """`--n-best K`: K lines a sentence, ROW<TAB>SCORE<TAB>TRANSLATION, best first."""
    _require(saved_model, "translate_nbest", "--n-best")
    if args.beam is None:
        width = int(
            saved_model.serving_limits()["beam_width"]
        )  # every export with translate_nbest has it
        if args.n_best > width:
            raise UserError(
                f"--n-best {args.n_best} is above the export's beam width ({width}): "
                "give --beam N with N >= K"
            )
    results = translate_nbest_rows(
        saved_model, texts, args.n_best, beam_width=args.beam, batch_size=args.batch_size
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


# ----------------------------------------------------------------------------- export


def add_export_parser(subparsers) -> None:

    translator_defaults = inspect.signature(Translator).parameters
    parser = subparsers.add_parser(
        "export",
        help=COMMANDS["export"],
        description="Write RUN_DIR's best checkpoint with its tokenizers to "
        "EXPORT_ROOT/NAME/VERSION/ (TF Serving layout), computing in float32 even if the "
        "run trained under --mixed-precision.",
    )
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help=f"a training run directory (holds {CONFIG_FILE} and {BEST_CHECKPOINT})",
    )
    parser.add_argument("--name", required=True, help="model name under the export root")
    parser.add_argument(
        "--export-root",
        default=DEFAULT_EXPORT_ROOT,
        help="directory of TF Serving models (default: %(default)s)",
    )
    parser.add_argument(
        "--version", type=int, default=None, help="integer version (default: the next free one)"
    )
    parser.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="most tokens a translation may have (default: "
        f"{DEFAULT_MAX_LENGTH}, or the model's max_length if smaller)",
    )
    parser.add_argument(
        "--max-source-length",
        type=int,
        default=None,
        metavar="N",
        help="cut sources at N tokens, [START] and [END] included, and flag them in the "
        "source_truncated output (default: the run's max_tokens, the longest source it "
        f"trained on; {DEFAULT_MAX_SOURCE_LENGTH} for runs that do not record it)",
    )
    parser.add_argument(
        "--sub-batch-size",
        type=int,
        default=translator_defaults["sub_batch_size"].default,
        metavar="N",
        help="rows decoded together inside one call: bounds a request's memory and the wait "
        "it imposes on other requests (default: %(default)s)",
    )
    parser.add_argument(
        "--in-flight",
        type=int,
        default=translator_defaults["in_flight"].default,
        metavar="N",
        help="searches run side by side within --sub-batch-size rows, each on its share: "
        "one search keeps about one core busy; twice the cores speeds a large batch "
        "translated alone, but slows small requests served beside it (default: %(default)s)",
    )
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile greedy and beam search with XLA: faster on CPU once compiled (2-3.5x "
        "at batch 1), but each new input shape compiles first; TF Serving then needs "
        "--xla_cpu_compilation_enabled=true (default: plain TensorFlow ops)",
    )
    parser.add_argument(
        "--average-last",
        type=int,
        default=None,
        metavar="N",
        help="export the average of the run's last N epoch checkpoints (kept when trained "
        "with --keep-epoch-checkpoints) (default: the best checkpoint)",
    )
    parser.add_argument(
        "--max-length-a",
        type=float,
        default=translator_defaults["max_length_a"].default,
        help="a row also stops after A * its source tokens + B tokens (default: %(default)s)",
    )
    parser.add_argument(
        "--max-length-b",
        type=float,
        default=translator_defaults["max_length_b"].default,
        help="B of that cap (default: %(default)s)",
    )
    parser.add_argument(
        "--beam-width",
        type=int,
        default=translator_defaults["beam_width"].default,
        help="width of the beam_search signature (default: %(default)s)",
    )
    parser.add_argument(
        "--length-penalty",
        type=float,
        default=translator_defaults["length_penalty_alpha"].default,
        help="GNMT length penalty alpha of beam search (default: %(default)s)",
    )
    add_common_flags(parser)
    parser.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:

    require_positive(
        args,
        "version",
        "max_length",
        "max_source_length",
        "sub_batch_size",
        "in_flight",
        "beam_width",
        "average_last",
    )
    path = export_run(
        args.run_dir,
        args.export_root,
        args.name,
        args.version,
        average_last=args.average_last,
        max_length=args.max_length,
        max_source_length=args.max_source_length,
        sub_batch_size=args.sub_batch_size,
        in_flight=args.in_flight,
        jit_compile=args.jit_compile,
        max_length_a=args.max_length_a,
        max_length_b=args.max_length_b,
        beam_width=args.beam_width,
        length_penalty_alpha=args.length_penalty,
    )
    print(path)
    return 0


# ----------------------------------------------------------------------------- evaluate


def add_evaluate_parser(subparsers) -> None:

    # sacrebleu's own list of BLEU tokenizers, so a typo is caught before translating.
    tokenizers = sorted(getattr(bleu, "_TOKENIZERS", {})) or None
    parser = subparsers.add_parser(
        "evaluate",
        help=COMMANDS["evaluate"],
        description="Translate --src with the SavedModel and score it against --ref "
        "(line-aligned files) with sacrebleu. Writes translations.txt and scores.json to "
        "--output-dir and prints one summary line and the scores as JSON. Pre-tokenized "
        "references (TED pt-en, Multi30k tok/) need --tokenize none, and lowercased "
        "Moses-tokenized ones (Multi30k tok/) --moses LANG for cased output.",
    )
    parser.add_argument("--model", required=True, help=MODEL_HELP)
    parser.add_argument("--src", required=True, help="source sentences, one a line")
    parser.add_argument("--ref", required=True, help="reference translations, line-aligned")
    parser.add_argument(
        "--tokenize",
        default=None,
        choices=tokenizers,
        help="sacrebleu BLEU tokenizer; 'none' for pre-tokenized text (default: "
        f"{DEFAULT_TOKENIZE}, or none with --moses)",
    )
    parser.add_argument("--lowercase", action="store_true", help="case-insensitive scores")
    parser.add_argument(
        "--moses",
        metavar="LANG",
        help="score the translations lowercased, punctuation-normalized and Moses-tokenized "
        "for language LANG (sacremoses), as the references of Multi30k tok/ were made "
        "(unset: scored as written)",
    )
    parser.add_argument("--beam", type=int, default=None, metavar="N", help=BEAM_HELP)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="sentences per call of the model (default: %(default)s)",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="where translations.txt and scores.json go (default: evaluations/NAME, "
        "NAME the model's)",
    )
    parser.add_argument(
        "--json-out",
        default="-",
        metavar="FILE",
        help="write the scores JSON to FILE; '-' prints it on stdout, and the summary line "
        "then goes to stderr (default: %(default)s)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_common_flags(parser)
    parser.set_defaults(func=run_evaluate)


def _model_name(model: str) -> str:
    path = Path(model).resolve()
    # saved_models/NAME/VERSION -> NAME
    return path.parent.name if path.name.isdigit() else path.name


def _check_not_another_evaluation(output_dir: Path, metadata: dict) -> None:
    """An evaluation's outputs are replaced only by the same evaluation run again: the
    default directory is the model's, and another test set or search must not
    overwrite its scores unasked."""
    scores_file = output_dir / "scores.json"
    if not scores_file.is_file():
        return
    try:
        earlier = json.loads(scores_file.read_text(encoding="utf-8"))
    except ValueError:
        earlier = {}
    if not isinstance(earlier, dict):
        earlier = {}
    changed = [key for key, value in metadata.items() if earlier.get(key) != value]
    if changed:
        raise UserError(
            f"{output_dir} holds the results of another evaluation (its "
            f"{', '.join(f'{key} {earlier.get(key)!r}' for key in changed)}): give another "
            "--output-dir, or remove that one"
        )


def run_evaluate(args: argparse.Namespace) -> int:

    require_positive(args, "beam", "batch_size")
    output_dir = args.output_dir or str(Path("evaluations") / _model_name(args.model))
    tokenize = args.tokenize or ("none" if args.moses else DEFAULT_TOKENIZE)
    metadata = {
        "model": str(args.model),
        "src": str(args.src),
        "ref": str(args.ref),
        "search": f"beam {args.beam}" if args.beam else "greedy",
        "moses": args.moses,
    }
    _check_not_another_evaluation(Path(output_dir), metadata)
    result = evaluate(
        args.model,
        args.src,
        args.ref,
        tokenize=tokenize,
        moses_lang=args.moses,
        lowercase=args.lowercase,
        batch_size=args.batch_size,
        output_dir=output_dir,
        beam_width=args.beam,
        progress=not args.no_progress,
        metadata=metadata,
    )
    text = json.dumps(result, indent=2)
    if args.json_out == "-":
        print(summary_line(result), file=sys.stderr)
        print(text)
    else:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(text + "\n", encoding="utf-8")
        print(summary_line(result))
        print(f"Scores: {args.json_out}; translations: {result['translations_file']}")
    return 0
