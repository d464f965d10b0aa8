"""`keras-transformer demo`: train on the built-in corpus, export, translate with the export."""

from __future__ import annotations

import argparse

from keras_transformer import demo
from keras_transformer.cli import settings
from keras_transformer.cli.common import COMMANDS, add_common_flags
from keras_transformer.inference.export import DEFAULT_EXPORT_ROOT


def add_demo_parser(subparsers) -> argparse.ArgumentParser:

    parser = subparsers.add_parser(
        "demo",
        help=COMMANDS["demo"],
        description=(
            "Train a small Transformer on the built-in corpus (numbers written as words, "
            "English -> Portuguese), export it, and translate a few held-out examples with "
            "the export."
        ),
    )
    parser.add_argument(
        "--run-dir",
        default=demo.DEFAULT_RUN_DIR,
        help="the training run directory (default: %(default)s)",
    )
    parser.add_argument(
        "--examples",
        type=int,
        default=demo.DEFAULT_EXAMPLES,
        help="held-out pairs to translate (default: %(default)s)",
    )
    parser.add_argument(
        "--export-root",
        default=DEFAULT_EXPORT_ROOT,
        help="directory of TF Serving models (default: %(default)s)",
    )
    parser.add_argument(
        "--name",
        default=demo.DEFAULT_EXPORT_NAME,
        help="exported model name (default: %(default)s)",
    )
    settings.add_config_flags(parser, defaults=demo.DEMO_SETTINGS)
    add_common_flags(parser)
    parser.set_defaults(func=_run_demo)
    return parser


def _run_demo(args: argparse.Namespace) -> int:

    config = settings.config_from_args(args, base=demo.DEMO_SETTINGS)
    print(
        f"Training a {config.num_layers}-layer Transformer (d_model {config.d_model}) to "
        f"translate numbers written as words ({config.demo_languages}), {config.epochs} epochs."
    )
    result = demo.run_demo(
        config,
        args.run_dir,
        args.export_root,
        name=args.name,
        examples=args.examples,
        verbose=args.fit_verbose,
    )
    settings.print_summary(result.history, result.run_dir)
    print(f"\nExported the best checkpoint to {result.export_dir} (TF Serving layout).")
    print("Translations of held-out numbers by the exported SavedModel (greedy search):")
    for row in result.translations:
        mark = "ok" if row.correct else "differs"
        print(
            f"  {row.source}\n    -> {row.translation}   "
            f"[{mark}; score {row.score:.3f}; reference: {row.reference}]"
        )
    print(
        f"\nRun directory: {result.run_dir}\nTranslate more: keras-transformer translate "
        f'--model {result.export_dir.parent} "..."'
    )
    return 0
