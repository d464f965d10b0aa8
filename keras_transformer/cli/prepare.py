"""`keras-transformer prepare`: tokenize a corpus once into prepared data."""

from __future__ import annotations

import argparse

from keras_transformer.cli import settings
from keras_transformer.cli.common import COMMANDS, add_common_flags
from keras_transformer.training import prepare as prepare_lib

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
    "source_language",
    "target_language",
    "seed",
)


def add_prepare_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "prepare",
        help=COMMANDS["prepare"],
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
