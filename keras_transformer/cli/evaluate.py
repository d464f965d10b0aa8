"""`keras-transformer evaluate`: an export's translations of a test set, scored with sacrebleu."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sacrebleu.metrics import bleu

from keras_transformer.cli.common import (
    COMMANDS,
    MODEL_HELP,
    UserError,
    add_common_flags,
    add_language_flags,
    add_search_flags,
    require_positive,
)
from keras_transformer.evaluation import DEFAULT_TOKENIZE, evaluate, summary_line


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
    add_search_flags(parser)
    parser.add_argument(
        "--output-dir",
        default=None,
        help="where translations.txt and scores.json go; another evaluation's results there "
        "are refused (default: evaluations/NAME/SRC-REF-SEARCH, from the model's name, the "
        "test files' names and greedy or beamN, with -2, -3, ... added when that one holds "
        "another evaluation's results, which are kept)",
    )
    parser.add_argument(
        "--json-out",
        default="-",
        metavar="FILE",
        help="write the scores JSON to FILE; '-' prints it on stdout, and the summary line "
        "then goes to stderr (default: %(default)s)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_language_flags(parser, "--src and --ref")
    add_common_flags(parser)
    parser.set_defaults(func=run_evaluate)


def _model_name(model: str) -> str:
    path = Path(model).resolve()
    # saved_models/NAME/VERSION -> NAME
    return path.parent.name if path.name.isdigit() else path.name


def _changed(output_dir: Path, metadata: dict) -> list[str]:
    """The fields of `metadata` in which the evaluation whose results `output_dir` holds
    differs from this one ([] if it holds none, or this one's)."""
    scores_file = output_dir / "scores.json"
    if not scores_file.is_file():
        return []
    try:
        earlier = json.loads(scores_file.read_text(encoding="utf-8"))
    except ValueError:
        earlier = {}
    if not isinstance(earlier, dict):
        earlier = {}
    return [
        f"{key} {earlier.get(key)!r}"
        for key, value in metadata.items()
        if earlier.get(key) != value
    ]


def _check_not_another_evaluation(output_dir: Path, metadata: dict) -> None:
    """An evaluation's outputs are replaced only by the same evaluation run again: an
    --output-dir given for another test set or search must not overwrite its scores."""
    changed = _changed(output_dir, metadata)
    if changed:
        raise UserError(
            f"{output_dir} holds the results of another evaluation (its {', '.join(changed)}): "
            "give another --output-dir, or remove that one"
        )


def default_output_dir(model: str, metadata: dict) -> Path:
    """evaluations/NAME/SRC-REF-SEARCH: one directory per model, test set and search, so
    evaluating a model on a second test set keeps the first's results. The same evaluation
    run again takes its own directory; another one whose names are the same (test files of
    the same names elsewhere, another version of the model) the next free -2, -3, ..."""
    search = metadata["search"].replace(" ", "")
    base = f"{Path(metadata['src']).name}-{Path(metadata['ref']).name}-{search}"
    parent = Path("evaluations") / _model_name(model)
    output_dir, number = parent / base, 1
    while _changed(output_dir, metadata):
        number += 1
        output_dir = parent / f"{base}-{number}"
    return output_dir


def run_evaluate(args: argparse.Namespace) -> int:

    require_positive(args, "beam", "batch_size")
    tokenize = args.tokenize or ("none" if args.moses else DEFAULT_TOKENIZE)
    metadata = {
        "model": str(args.model),
        "src": str(args.src),
        "ref": str(args.ref),
        "search": f"beam {args.beam}" if args.beam else "greedy",
        "moses": args.moses,
    }
    if args.source_language or args.target_language:
        metadata["languages"] = f"{args.source_language}-{args.target_language}"
    if args.output_dir:
        output_dir = Path(args.output_dir)
        _check_not_another_evaluation(output_dir, metadata)
    else:
        output_dir = default_output_dir(args.model, metadata)
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
        source_language=args.source_language,
        target_language=args.target_language,
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
