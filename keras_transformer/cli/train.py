"""`keras-transformer train` and `keras-transformer demo`."""

from __future__ import annotations

import argparse

from keras_transformer import demo
from keras_transformer import prepare as prepare_lib
from keras_transformer.cli import settings
from keras_transformer.cli.common import add_common_flags
from keras_transformer.export import DEFAULT_EXPORT_ROOT
from keras_transformer.training import train


def add_train_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="train a translator (built-in corpus, parallel text files, TSV or tfds)",
        description=(
            "Train a Transformer translator. Settings: defaults (the TensorFlow tutorial's), "
            "then a JSON --config file, then flags; --src or --tsv alone select --corpus "
            "files or tsv. Starting it again on the same --run-dir resumes from the last "
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


# ----------------------------------------------------------------------------- prepare

# The settings `prepare` reads: the corpus, its validation set, the tokenizer, the seed.
PREPARE_SETTINGS = (
    "corpus",
    "src",
    "tgt",
    "tsv",
    "tfds_name",
    "demo_pairs",
    "demo_languages",
    "val_src",
    "val_tgt",
    "val_tsv",
    "val_fraction",
    "tokenizer",
    "shared_vocab",
    "subword_model",
    "vocab_size",
    "vocab_lower_thresh",
    "lower_case",
    "normalization_form",
    "seed",
)


def add_prepare_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "prepare",
        help="tokenize a corpus once, so that every run from it starts in seconds",
        description=(
            "Learn (or take) the tokenizer and tokenize every pair once, streaming the corpus, "
            "into a prepared data directory of id shards that `train --data` reads (its loader "
            "needs no TensorFlow). Example: `keras-transformer prepare --src train.en "
            "--tgt train.de --val-src val.en --val-tgt val.de --preset base --output data/ende`."
        ),
    )
    parser.add_argument(
        "--output", required=True, help="the directory to write (must not exist; no default)"
    )
    parser.add_argument(
        "--tokenizer-from",
        metavar="DIR",
        help="take the tokenizer of this run or prepared directory; unset: learn one",
    )
    parser.add_argument(
        "--shard-pairs",
        type=int,
        default=prepare_lib.DEFAULT_SHARD_PAIRS,
        help="pairs a shard (about); several workers read disjoint shards (default: %(default)s)",
    )
    parser.add_argument(
        "--tokenizer-sentences",
        type=int,
        default=prepare_lib.DEFAULT_TOKENIZER_SENTENCES,
        help="learn the tokenizer from a random sample of this many training sentences "
        "(default: %(default)s)",
    )
    settings.add_config_flags(parser, names=PREPARE_SETTINGS)
    add_common_flags(parser)
    parser.set_defaults(func=_run_prepare)
    return parser


def _run_prepare(args: argparse.Namespace) -> int:
    config = settings.config_from_args(args)
    output = prepare_lib.prepare(
        config,
        args.output,
        tokenizer_from=args.tokenizer_from,
        shard_pairs=args.shard_pairs,
        tokenizer_sentences=args.tokenizer_sentences,
    )
    index = prepare_lib.prepared.PreparedData(output)
    print(
        f"Prepared {index.pairs('train')} training and {index.pairs('validation')} validation "
        f"pairs into {output}; train from them with `keras-transformer train --data {output}`."
    )
    return 0


# ----------------------------------------------------------------------------- demo


def add_demo_parser(subparsers) -> argparse.ArgumentParser:

    parser = subparsers.add_parser(
        "demo",
        help="train on the built-in corpus (minutes on a CPU) and show translations",
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
