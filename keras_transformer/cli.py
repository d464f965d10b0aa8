"""`keras-transformer train | demo | translate | export | evaluate | plot`: a thin command line.

Each subcommand only parses flags and calls library functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

DEFAULT_DEMO_RUN_DIR = "runs/demo"


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _optional(kind):
    def parse(text: str):
        return None if text.lower() in ("none", "null", "") else kind(text)

    parse.__name__ = kind.__name__
    return parse


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    """--config, --verbose, and one flag per TrainConfig field (--d-model, --src, ...).

    Unset field flags stay None, so that only the flags given override --config.
    """
    from keras_transformer.training import TrainConfig

    parser.add_argument("--config", help="JSON file of settings (TrainConfig field names)")
    parser.add_argument(
        "--verbose",
        type=lambda v: v if v == "auto" else int(v),
        default="auto",
        help="model.fit verbosity: auto, 0, 1 (progress bar) or 2 (a line per epoch)",
    )
    group = parser.add_argument_group("training settings (override --config)")
    for field in dataclasses.fields(TrainConfig):
        default = field.default
        kind = {bool: _bool, int: int, float: float}.get(type(default), str)
        if field.name in ("batch_tokens", "steps_per_epoch", "early_stopping_patience"):
            kind = _optional(int)
        elif field.name == "time_budget_minutes":
            kind = _optional(float)
        elif default is None or field.name == "normalization_form":
            kind = _optional(str)
        group.add_argument(
            "--" + field.name.replace("_", "-"),
            dest=field.name,
            type=kind,
            default=None,
            metavar=field.name.upper() if kind is not _bool else "{true,false}",
            help=f"default: {default}",
        )


def _config_from_args(args: argparse.Namespace, base: dict | None = None):
    """Defaults < `base` < --config file < flags given on the command line."""
    from keras_transformer.training import TrainConfig, read_config_file

    values = dict(base or {})
    if args.config:
        values.update(read_config_file(args.config))
    flags = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(TrainConfig)
        if getattr(args, f.name, None) is not None
    }
    values.update(flags)
    if "corpus" not in flags and "corpus" not in values:
        if values.get("src") or values.get("tgt"):
            values["corpus"] = "files"
        elif values.get("tsv"):
            values["corpus"] = "tsv"
    return TrainConfig.from_dict(values)


def _run_train(args: argparse.Namespace) -> int:
    from keras_transformer.training import train

    config = _config_from_args(args)
    history = train(config, args.run_dir, verbose=args.verbose)
    _print_summary(history, args.run_dir)
    return 0


def _print_summary(history, run_dir) -> None:
    values = history.history.get("val_masked_accuracy") or [None]
    print(f"Validation masked accuracy after epoch {len(values)}: {values[-1]}")
    print(f"Run directory: {run_dir}")


def add_train_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="train a translator (built-in corpus, parallel text files, TSV or tfds)",
        description=(
            "Train a Transformer translator. Settings: defaults (the TensorFlow tutorial's), "
            "then a JSON --config file, then flags. Starting it again on the same --run-dir "
            "resumes from the last completed epoch. Examples: "
            "`keras-transformer train --src train.pt --tgt train.en --val-src dev.pt "
            "--val-tgt dev.en --run-dir runs/ted`; `keras-transformer train --corpus tfds`."
        ),
    )
    parser.add_argument(
        "--run-dir",
        required=True,
        help="where config, vocabularies, "
        "checkpoints, logs and history go (resumes if it holds a run)",
    )
    _add_config_flags(parser)
    parser.set_defaults(func=_run_train)
    return parser


def _run_demo(args: argparse.Namespace) -> int:
    from keras_transformer import data
    from keras_transformer.data import load_corpus
    from keras_transformer.demo import DEMO_SETTINGS
    from keras_transformer.export import export_run, load_translator, translate_texts
    from keras_transformer.training import train

    config = _config_from_args(args, base=DEMO_SETTINGS)
    print(
        f"Training a {config.num_layers}-layer Transformer (d_model {config.d_model}) to "
        f"translate numbers written as words ({config.demo_languages}), {config.epochs} epochs."
    )
    history = train(config, args.run_dir, verbose=args.verbose)
    _print_summary(history, args.run_dir)

    export_dir = export_run(args.run_dir, args.export_root, name=args.name)
    print(f"\nExported the best checkpoint to {export_dir} (TF Serving layout).")
    saved_model = load_translator(export_dir)
    _, val_pairs = load_corpus(config)
    examples = val_pairs[: args.examples]
    results = translate_texts(saved_model, data.texts(examples, 0))
    print("Translations of held-out numbers by the exported SavedModel (greedy search):")
    for (src, ref), (out, score) in zip(examples, results, strict=True):
        mark = "ok" if out == target_normalized(ref) else "differs"
        print(f"  {src}\n    -> {out}   [{mark}; score {score:.3f}; reference: {ref}]")
    print(
        f"\nRun directory: {args.run_dir}\nTranslate more: keras-transformer translate "
        f'--model {Path(export_dir).parent} "..."'
    )
    return 0


def target_normalized(text: str) -> str:
    """The reference as detokenize writes it: lowercased, punctuation set off by spaces."""
    import re

    return " ".join(re.sub(r"([^\w\s])", r" \1 ", text.lower()).split())


def add_demo_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "demo",
        help="train on the built-in corpus (minutes on a CPU) and show translations",
        description=(
            "Train a small Transformer on the built-in corpus (numbers written as words, "
            "English -> Portuguese), then translate a few held-out examples."
        ),
    )
    parser.add_argument("--run-dir", default=DEFAULT_DEMO_RUN_DIR, help="default: %(default)s")
    parser.add_argument("--examples", type=int, default=5, help="translations to show")
    parser.add_argument("--export-root", default="saved_models", help="default: %(default)s")
    parser.add_argument("--name", default="demo", help="exported model name; default: %(default)s")
    _add_config_flags(parser)
    parser.set_defaults(func=_run_demo)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="Train, export, translate with and evaluate Transformer translators.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    # Each subcommand registers itself here: add_<name>_parser(subparsers).
    add_train_parser(subparsers)
    add_demo_parser(subparsers)
    add_translate_parser(subparsers)
    add_export_parser(subparsers)
    add_evaluate_parser(subparsers)
    add_plot_parser(subparsers)
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


def add_evaluate_parser(subparsers) -> None:
    from sacrebleu.metrics import bleu

    # sacrebleu's own list of BLEU tokenizers, so a typo is caught before translating.
    tokenizers = sorted(getattr(bleu, "_TOKENIZERS", {})) or None
    parser = subparsers.add_parser(
        "evaluate",
        help="BLEU and chrF of an exported SavedModel on a test set.",
        description="Translate --src with the SavedModel and score it against --ref "
        "(line-aligned files) with sacrebleu. Writes translations.txt and scores.json to "
        "--output-dir and prints one summary line and the scores as JSON. Pre-tokenized "
        "corpora (TED pt-en, Multi30k tok/) need --tokenize none.",
    )
    parser.add_argument(
        "--model",
        required=True,
        help="SavedModel: saved_models/NAME (latest version) or saved_models/NAME/VERSION",
    )
    parser.add_argument("--src", required=True, help="source sentences, one a line")
    parser.add_argument("--ref", required=True, help="reference translations, line-aligned")
    parser.add_argument(
        "--tokenize",
        default="13a",
        choices=tokenizers,
        help="sacrebleu BLEU tokenizer; 'none' for pre-tokenized text (default: %(default)s)",
    )
    parser.add_argument("--lowercase", action="store_true", help="case-insensitive scores")
    parser.add_argument("--beam", type=int, default=None, metavar="N", help="beam search width")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--output-dir",
        default=None,
        help="where translations.txt and scores.json go (default: evaluations/NAME)",
    )
    parser.add_argument(
        "--json-out",
        default="-",
        metavar="FILE",
        help="write the scores JSON here; '-' (default) prints it on stdout, "
        "and the summary line then goes to stderr",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_evaluate)


def _model_name(model: str) -> str:
    path = Path(model).resolve()
    # saved_models/NAME/VERSION -> NAME
    return path.parent.name if path.name.isdigit() else path.name


def run_evaluate(args: argparse.Namespace) -> int:
    import json

    from keras_transformer.evaluation import evaluate, summary_line

    if args.beam is not None and args.beam <= 0:
        raise SystemExit(f"--beam must be a positive integer, got {args.beam}")
    if args.batch_size <= 0:
        raise SystemExit(f"--batch-size must be a positive integer, got {args.batch_size}")
    for flag, path in (("--src", args.src), ("--ref", args.ref)):
        if not Path(path).is_file():
            raise SystemExit(f"{flag} {path}: no such file")
    output_dir = args.output_dir or str(Path("evaluations") / _model_name(args.model))
    try:
        result = evaluate(
            args.model,
            args.src,
            args.ref,
            tokenize=args.tokenize,
            lowercase=args.lowercase,
            batch_size=args.batch_size,
            output_dir=output_dir,
            beam_width=args.beam,
            progress=not args.no_progress,
        )
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(str(error)) from None
    result.update(
        model=str(args.model),
        src=str(args.src),
        ref=str(args.ref),
        search=f"beam {args.beam}" if args.beam else "greedy",
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


def add_plot_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="Figures: positional encoding, learning rate, attention heads, training curves.",
        description="Draw one figure into a PNG file (--out).",
    )
    kinds = parser.add_subparsers(dest="figure", required=True, metavar="FIGURE")

    encoding = kinds.add_parser("encoding", help="the sinusoidal positional encoding")
    encoding.add_argument("--length", type=int, default=128, help="positions")
    encoding.add_argument("--depth", type=int, default=128, help="dimensions (d_model)")

    schedule = kinds.add_parser("schedule", help="the warmup learning-rate schedule")
    schedule.add_argument("--d-model", type=int, default=128)
    schedule.add_argument("--warmup-steps", type=int, default=4000)
    schedule.add_argument("--steps", type=int, default=40000, help="train steps to draw")

    attention = kinds.add_parser(
        "attention",
        help="the last decoder layer's cross-attention heads while translating a sentence",
        description="Load RUN_DIR's best checkpoint, translate SENTENCE and draw the "
        "cross-attention weights of each head of the last decoder layer.",
    )
    attention.add_argument("--run-dir", required=True, help="a training run directory")
    attention.add_argument("sentence", help="the source sentence")
    attention.add_argument("--beam", type=int, default=None, metavar="N", help="beam search")
    attention.add_argument(
        "--checkpoint", default="checkpoints/best.keras", help="default: %(default)s"
    )

    curves = kinds.add_parser("curves", help="loss and accuracy per epoch of a training run")
    curves.add_argument("--run-dir", required=True, help="a training run directory")

    for sub in (encoding, schedule, attention, curves):
        sub.add_argument("--out", required=True, metavar="FILE.png", help="the PNG to write")
    parser.set_defaults(func=run_plot)


def run_plot(args: argparse.Namespace) -> int:
    from keras_transformer import plotting

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in ("length", "depth", "d_model", "warmup_steps", "steps", "beam"):
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be positive, got {value}")
    if args.figure == "encoding":
        plotting.plot_positional_encoding(args.length, args.depth, path=out)
    elif args.figure == "schedule":
        plotting.plot_learning_rate(args.d_model, args.warmup_steps, args.steps, path=out)
    elif args.figure == "curves":
        if not (Path(args.run_dir) / "history.json").is_file():
            raise SystemExit(f"{args.run_dir} has no history.json: no finished epoch to plot")
        plotting.plot_training_curves(args.run_dir, out)
    else:
        from keras_transformer.run_dir import load_run
        from keras_transformer.translator import Translator

        try:
            model, source_tokenizer, target_tokenizer, _ = load_run(args.run_dir, args.checkpoint)
        except FileNotFoundError as error:
            raise SystemExit(str(error)) from None
        translator = Translator(model, source_tokenizer, target_tokenizer)
        method = "greedy" if args.beam is None else "beam"
        plotting.plot_translation_attention(
            translator, args.sentence, path=out, method=method, beam_width=args.beam
        )
    print(out)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
