"""`keras-transformer train`: the one command that runs without TensorFlow (from prepared data)."""

from __future__ import annotations

import argparse

from keras_transformer.cli import settings
from keras_transformer.cli.common import COMMANDS, add_common_flags
from keras_transformer.training import train


def add_train_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help=COMMANDS["train"],
        description=(
            "Train a Transformer translator. Settings: defaults (the TensorFlow tutorial's), "
            "then a JSON --config file, then flags; --src or --tsv alone select --corpus "
            "files or tsv. From prepared data (--data DIR), the run takes the tokenizer "
            "settings DIR was prepared with; a tokenizer flag or --config value that differs "
            "is refused. Starting it again on the same --run-dir resumes from the last "
            "completed epoch. Examples: "
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
    settings.add_config_flags(parser)
    add_common_flags(parser)
    parser.set_defaults(func=_run_train)
    return parser


def _run_train(args: argparse.Namespace) -> int:

    config = settings.config_from_args(args)
    history = train(config, args.run_dir, verbose=args.fit_verbose)
    settings.print_summary(history, args.run_dir)
    return 0
