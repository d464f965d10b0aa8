"""`keras-transformer plot FIGURE`: figures into PNG files."""

from __future__ import annotations

import argparse
from pathlib import Path

from keras_transformer import plotting
from keras_transformer.cli.common import (
    BEAM_HELP,
    COMMANDS,
    UserError,
    add_common_flags,
    require_positive,
)
from keras_transformer.inference.translator import Translator
from keras_transformer.training.run_dir import BEST_CHECKPOINT, HISTORY_FILE, load_run


def add_plot_parser(subparsers) -> None:

    parser = subparsers.add_parser(
        "plot",
        help=COMMANDS["plot"],
        description="Draw one figure into a PNG file (--out).",
    )
    add_common_flags(parser)
    kinds = parser.add_subparsers(dest="figure", required=True, metavar="FIGURE")

    encoding = kinds.add_parser("encoding", help="the sinusoidal positional encoding")
    encoding.add_argument(
        "--length", type=int, default=128, help="positions (default: %(default)s)"
    )
    encoding.add_argument(
        "--depth", type=int, default=128, help="dimensions, d_model (default: %(default)s)"
    )

    schedule = kinds.add_parser("schedule", help="the warmup learning-rate schedule")
    schedule.add_argument(
        "--d-model", type=int, default=128, help="the model's d_model (default: %(default)s)"
    )
    schedule.add_argument(
        "--warmup-steps", type=int, default=4000, help="warmup steps (default: %(default)s)"
    )
    schedule.add_argument(
        "--steps", type=int, default=40000, help="training steps to draw (default: %(default)s)"
    )

    attention = kinds.add_parser(
        "attention",
        help="the last decoder layer's cross-attention heads while translating a sentence",
        description="Load RUN_DIR's best checkpoint, translate SENTENCE and draw the "
        "cross-attention weights of each head of the last decoder layer.",
    )
    attention.add_argument("--run-dir", required=True, help="a training run directory")
    attention.add_argument("sentence", help="the source sentence")
    attention.add_argument("--beam", type=int, default=None, metavar="N", help=BEAM_HELP)
    attention.add_argument(
        "--checkpoint",
        default=BEST_CHECKPOINT,
        help="the checkpoint, relative to the run directory (default: %(default)s)",
    )

    curves = kinds.add_parser("curves", help="loss and accuracy per epoch of a training run")
    curves.add_argument("--run-dir", required=True, help="a training run directory")

    for sub in (encoding, schedule, attention, curves):
        sub.add_argument("--out", required=True, metavar="FILE.png", help="the PNG to write")
        add_common_flags(sub)
    parser.set_defaults(func=run_plot)


def run_plot(args: argparse.Namespace) -> int:

    require_positive(args, "length", "depth", "d_model", "warmup_steps", "steps", "beam")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.figure == "encoding":
        plotting.plot_positional_encoding(args.length, args.depth, path=out)
    elif args.figure == "schedule":
        plotting.plot_learning_rate(args.d_model, args.warmup_steps, args.steps, path=out)
    elif args.figure == "curves":
        if not Path(args.run_dir).is_dir():
            raise UserError(f"{args.run_dir} is not a directory: give a run directory")
        if not (Path(args.run_dir) / HISTORY_FILE).is_file():
            raise UserError(f"{args.run_dir} has no {HISTORY_FILE}: no finished epoch to plot")
        plotting.plot_training_curves(args.run_dir, out)
    else:
        model, source_tokenizer, target_tokenizer, _ = load_run(args.run_dir, args.checkpoint)
        if hasattr(source_tokenizer, "tokenize_in"):
            raise UserError(
                "plot attention translates with a single-pair run; a multilingual "
                "checkpoint's attention is not plotted"
            )
        translator = Translator(model, source_tokenizer, target_tokenizer)
        method = "greedy" if args.beam is None else "beam"
        plotting.plot_translation_attention(
            translator, args.sentence, path=out, method=method, beam_width=args.beam
        )
    print(out)
    return 0
