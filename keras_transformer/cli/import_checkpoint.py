"""`keras-transformer import`: a published checkpoint (MarianMT / OPUS-MT, NLLB-200,
M2M-100, mBART-50) as a run directory; `import-marian` is its first name, kept."""

from __future__ import annotations

import argparse
import sys

from keras_transformer.cli.common import COMMANDS, PROG
from keras_transformer.pretrained import import_checkpoint
from keras_transformer.training import run_dir as run_dir_lib

NAMES = ("import", "import-marian")


def add_import_parser(subparsers) -> None:
    for name in NAMES:
        parser = subparsers.add_parser(
            name,
            help=COMMANDS[name],
            description="Import a checkpoint directory, as transformers' save_pretrained "
            "writes it or `huggingface-cli download REPO --local-dir DIR` fetches it, into a "
            "new run directory: the library's Transformer with the checkpoint's weights "
            "(checkpoints/best.keras), its tokenizers and its generation settings. The family "
            "is config.json's model_type: marian (OPUS-MT: source.spm, target.spm, "
            "vocab.json), m2m_100 (M2M-100 and NLLB-200) or mbart (mBART-50), the last two "
            "with sentencepiece.bpe.model and tokenizer.json or vocab.json. "
            f"`{PROG} export RUN` exports it; `{PROG} train --init-from RUN` fine-tunes it. "
            "Reads model.safetensors (or its shards) or pytorch_model.bin without torch. A "
            "checkpoint that cannot be imported is refused in one line naming the file or "
            "setting, and no run directory is left.",
        )
        parser.add_argument("checkpoint", help="the checkpoint directory")
        parser.add_argument(
            "--run-dir", required=True, help="the run directory to create (new, or empty)"
        )
        parser.set_defaults(func=run_import)


def run_import(args: argparse.Namespace) -> None:
    run_dir = import_checkpoint(args.checkpoint, args.run_dir)
    print(f"Imported {args.checkpoint} into {run_dir}")
    settings = run_dir_lib.read_config(run_dir).get("generation", {})
    print(
        f"Its export decodes as its {settings.get('source') or 'defaults'} says: beam "
        f"{settings.get('beam_width', 'unset (the library default)')}, length penalty "
        f"{settings.get('length_penalty_alpha')} "
        f"(transformers' normalization), early stopping {settings.get('early_stopping')}, "
        f"at most {settings.get('max_length')} tokens; export flags override them."
    )
    unsupported = settings.get("unsupported") or {}
    if unsupported:
        shown = ", ".join(f"{name}={value!r}" for name, value in unsupported.items())
        print(
            f"{PROG}: note: settings the searches do not follow (docs/pretrained.md): {shown}",
            file=sys.stderr,
        )
    print(f"Export it: {PROG} export {run_dir} --export-root saved_models --name NAME")
