"""`keras-transformer import-marian`: a MarianMT (OPUS-MT) checkpoint as a run directory."""

from __future__ import annotations

import argparse

from keras_transformer.cli.common import COMMANDS, PROG
from keras_transformer.pretrained import import_marian


def add_import_marian_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "import-marian",
        help=COMMANDS["import-marian"],
        description="Import a MarianMT checkpoint directory, as transformers' save_pretrained "
        "writes it or `huggingface-cli download Helsinki-NLP/opus-mt-en-de --local-dir DIR` "
        "fetches it (config.json, model.safetensors, source.spm, target.spm, vocab.json), "
        "into a new run directory: the library's Transformer with the checkpoint's weights "
        "(checkpoints/best.keras) and its tokenizers. "
        f"`{PROG} export RUN` exports it; `{PROG} train --init-from RUN` fine-tunes it. "
        "Needs no torch and no transformers. A checkpoint that cannot be imported is "
        "refused in one line naming the file or setting, and no run directory is left.",
    )
    parser.add_argument("checkpoint", help="the MarianMT checkpoint directory")
    parser.add_argument(
        "--run-dir", required=True, help="the run directory to create (new, or empty)"
    )
    parser.set_defaults(func=run_import_marian)


def run_import_marian(args: argparse.Namespace) -> None:
    run_dir = import_marian(args.checkpoint, args.run_dir)
    print(f"Imported {args.checkpoint} into {run_dir}")
    print(f"Export it: {PROG} export {run_dir} --export-root saved_models --name NAME")
