"""The run directory: everything a training run leaves behind, in one place.

Layout (written by training, read by export, translate and evaluate):

    RUN_DIR/config.json           {"model": Transformer config, "tokenizer": {...}, "data": {...},
                                   "training": {...}, "files": {tokenizer file: its SHA-256},
                                   "pretrained": {...} (an imported checkpoint's run only)}
    RUN_DIR/spm_source.model      source SentencePiece model (tokenizer "sentencepiece")
    RUN_DIR/spm_target.model      target SentencePiece model
    RUN_DIR/spm_joint.model       or one model for both sides (shared_vocab)
    RUN_DIR/vocab_source.txt      source WordPiece vocabulary, one token a line (tokenizer
                                  "wordpiece", and every run made before SentencePiece)
    RUN_DIR/vocab_target.txt      target WordPiece vocabulary
    RUN_DIR/vocab_joint.txt       or one vocabulary for both sides (shared_vocab)
    RUN_DIR/marian_source.json    an imported Marian checkpoint's source tokenizer (tokenizer
                                  "marian": its SentencePiece model and pieces; import-marian)
    RUN_DIR/marian_target.json    its target tokenizer
    RUN_DIR/checkpoints/best.keras   best model by validation loss
    RUN_DIR/checkpoints/last.keras   model at the end of the last epoch
    RUN_DIR/checkpoints/epoch_NNNN.keras   the last epochs, kept for averaging (optional)
    RUN_DIR/backup/epoch_NNNN.weights.h5   weights and optimizer state of the last two epochs
                                  (resume after a kill; see backup.py)
    RUN_DIR/logs/                 TensorBoard logs
    RUN_DIR/history.json          per-epoch metrics: the record of the epochs done
    RUN_DIR/training_curves.png   loss and accuracy curves

Every file is written under a temporary name and renamed into place
(`atomic.write_atomically`): a killed run leaves whole files only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from keras_transformer.atomic import write_atomically
from keras_transformer.training import checkpoints
from keras_transformer.training.config import TrainConfig

CONFIG_FILE = "config.json"
SOURCE_VOCAB_FILE = "vocab_source.txt"
TARGET_VOCAB_FILE = "vocab_target.txt"
JOINT_VOCAB_FILE = "vocab_joint.txt"
SOURCE_SPM_FILE = "spm_source.model"
TARGET_SPM_FILE = "spm_target.model"
JOINT_SPM_FILE = "spm_joint.model"
SOURCE_MARIAN_FILE = "marian_source.json"
TARGET_MARIAN_FILE = "marian_target.json"
JOINT_MARIAN_FILE = "marian_joint.json"
# An imported multilingual checkpoint's one tokenizer (NLLB, M2M-100, mBART-50).
MULTILINGUAL_FILE = "multilingual.json"
# Tokenizer kind -> (source file, target file, joint file).
TOKENIZER_FILES = {
    "sentencepiece": (SOURCE_SPM_FILE, TARGET_SPM_FILE, JOINT_SPM_FILE),
    "wordpiece": (SOURCE_VOCAB_FILE, TARGET_VOCAB_FILE, JOINT_VOCAB_FILE),
    # Marian's sides have SentencePiece models of their own even where one vocabulary
    # serves both: an imported run never has a joint file.
    "marian": (SOURCE_MARIAN_FILE, TARGET_MARIAN_FILE, JOINT_MARIAN_FILE),
    "multilingual": (SOURCE_MARIAN_FILE, TARGET_MARIAN_FILE, MULTILINGUAL_FILE),
}
# A "tokenizer" section without a kind was written before SentencePiece came: WordPiece.
LEGACY_TOKENIZER_KIND = "wordpiece"
CHECKPOINT_DIR = "checkpoints"
BEST_CHECKPOINT = "checkpoints/best.keras"
LAST_CHECKPOINT = "checkpoints/last.keras"
BACKUP_DIR = "backup"
LOG_DIR = "logs"
HISTORY_FILE = "history.json"
CURVES_FILE = "training_curves.png"

# config.json's sections -> the keys they may hold (None: any, the "files" section's
# file names). A run of another version may name settings this one does not know.
_SETTINGS = frozenset(f.name for f in dataclasses.fields(TrainConfig))
CONFIG_KEYS = {
    "model": _SETTINGS | {"input_vocab_size", "target_vocab_size"},
    # SentencePiece's settings are WordPiece's and two more.
    "tokenizer": frozenset(TrainConfig(tokenizer="sentencepiece").tokenizer_kwargs())
    | frozenset(TrainConfig(tokenizer="multilingual").tokenizer_kwargs()),
    "data": _SETTINGS,
    "training": _SETTINGS,
    "files": None,
    # An imported checkpoint's origin (keras_transformer.pretrained): kind, checkpoint.
    "pretrained": None,
    # An imported checkpoint's own decoding settings (generation_config.json), which its
    # export decodes with unless told otherwise.
    "generation": None,
}


def epoch_checkpoint(run_dir: str | os.PathLike, epoch: int) -> Path:
    """The checkpoint of epoch `epoch` (counted from 1), kept for averaging."""
    return Path(run_dir) / CHECKPOINT_DIR / f"epoch_{epoch:04d}.keras"


def epoch_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The run's kept epoch checkpoints, oldest first."""
    return sorted((Path(run_dir) / CHECKPOINT_DIR).glob("epoch_[0-9]*.keras"))


def write_json_atomically(path: Path, value, **dump_options) -> Path:
    """Writes `value` as JSON under a temporary name, then renames it into place.

    A kill mid-write leaves the old file or the new one, never half of one.
    """
    text = json.dumps(value, **dump_options) + "\n"
    return write_atomically(path, lambda partial: partial.write_text(text, encoding="utf-8"))


def write_config(run_dir: str | os.PathLike, config: dict) -> Path:
    path = Path(run_dir) / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_json_atomically(path, config, indent=2, sort_keys=True)


def read_config(run_dir: str | os.PathLike) -> dict:
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory: {path} is missing.")
    config = _read_json(path)
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a JSON object of sections {sorted(CONFIG_KEYS)}.")
    unknown = [section for section in config if section not in CONFIG_KEYS]
    for section, known in CONFIG_KEYS.items():
        values = config.get(section, {})
        if not isinstance(values, dict):
            raise ValueError(f"{path}: its {section!r} section must be a JSON object.")
        if known is not None:
            unknown += [f"{section}.{key}" for key in values if key not in known]
    if unknown:
        raise ValueError(
            f"{path} names unknown settings: {', '.join(unknown)} (a run of another version "
            "of keras_transformer?)."
        )
    return config


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path} is not valid JSON: {error}") from None


def read_history(run_dir: str | os.PathLike) -> list[dict]:
    """history.json: one dict per completed epoch ("epoch" counts from 1)."""
    path = Path(run_dir) / HISTORY_FILE
    if not path.is_file():
        return []
    entries = _read_json(path)
    if not isinstance(entries, list) or not all(
        isinstance(entry, dict) and isinstance(entry.get("epoch"), int) for entry in entries
    ):
        raise ValueError(f'{path} must hold a JSON list of epochs, [{{"epoch": 1, ...}}, ...].')
    return entries


def tokenizer_settings(config: dict) -> dict:
    """config.json's "tokenizer" section, with what runs of earlier versions left unsaid.

    A section without "kind" is WordPiece's, and without "shared_vocab" has one
    vocabulary per side.
    """
    settings = dict(config.get("tokenizer") or {})
    settings.setdefault("kind", LEGACY_TOKENIZER_KIND)
    settings.setdefault("shared_vocab", False)
    if settings["kind"] not in TOKENIZER_FILES:
        raise ValueError(
            f"Unknown tokenizer kind {settings['kind']!r} in {CONFIG_FILE}; known: "
            f"{sorted(TOKENIZER_FILES)}."
        )
    return settings


def tokenizer_files(settings: dict) -> tuple[str, str]:
    """(source, target) file names of the tokenizers `settings` describe; the same name
    twice for a joint vocabulary."""
    source, target, joint = TOKENIZER_FILES[settings["kind"]]
    return (joint, joint) if settings["shared_vocab"] else (source, target)


def tokenizer_fingerprints(run_dir: str | os.PathLike, settings: dict) -> dict[str, str]:
    """Tokenizer file name -> SHA-256 of its content (config.json's "files")."""
    return {
        name: hashlib.sha256((Path(run_dir) / name).read_bytes()).hexdigest()
        for name in sorted(set(tokenizer_files(settings)))
    }


def _check_tokenizer_files(run_dir: Path, config: dict, settings: dict) -> None:
    """The tokenizer files are the ones config.json records (by SHA-256, when it does)."""
    recorded = config.get("files", {})
    for name, fingerprint in tokenizer_fingerprints(run_dir, settings).items():
        if name in recorded and recorded[name] != fingerprint:
            raise ValueError(
                f"{run_dir / name} is not the tokenizer this run was trained with: its SHA-256 "
                f"differs from the one {CONFIG_FILE} records (copied from another run, or "
                "changed?). Put the run's own file back, or train a new run in another directory."
            )


def _check_vocab_sizes(run_dir: Path, config: dict, settings: dict, tokenizers) -> None:
    """The tokenizers have the vocabulary sizes the run's model was built for."""
    model = config.get("model", {})
    files = tokenizer_files(settings)
    for side, filename, tokenizer in zip(("input", "target"), files, tokenizers, strict=True):
        expected = model.get(f"{side}_vocab_size")
        if expected is not None and tokenizer.vocab_size != expected:
            raise ValueError(
                f"{run_dir / filename} holds {tokenizer.vocab_size} tokens, but the run's model "
                f"was built for {expected} ({CONFIG_FILE}): it is not this run's tokenizer."
            )


def checked_languages(directory: str | os.PathLike, settings: dict, origin: str) -> dict:
    """`settings`' source_language and target_language, each a code the multilingual
    tokenizer file in `directory` knows (read as JSON: no TensorFlow needed); a missing
    or unknown one is a ValueError in one line naming the flag (`origin` names where
    the tokenizer comes from)."""
    missing = [
        f"--{name.replace('_', '-')} CODE"
        for name in ("source_language", "target_language")
        if not settings.get(name)
    ]
    if missing:
        raise ValueError(
            f"{origin} is a multilingual checkpoint's: give the pairs' languages "
            f"({' '.join(missing)})."
        )
    path = Path(directory) / MULTILINGUAL_FILE
    known = sorted(_read_json(path).get("languages", {}))
    for name in ("source_language", "target_language"):
        if settings[name] not in known:
            shown = ", ".join(known[:5]) + (
                f", ... ({len(known)} in all)" if len(known) > 5 else ""
            )
            raise ValueError(
                f"Unknown {name.replace('_', ' ')} {settings[name]!r}: {path} knows {shown}."
            )
    return {name: settings[name] for name in ("source_language", "target_language")}


def make_tokenizers(run_dir: str | os.PathLike, settings: dict):
    """(source, target) tokenizers from `settings` (`tokenizer_settings`) and the files
    in `run_dir`; one tokenizer object twice for a joint vocabulary."""
    from keras_transformer.text.tokenizers import (
        TOKENIZER_KINDS,  # needs TensorFlow: imported on use
    )

    run_dir = Path(run_dir)
    tokenizer_class = TOKENIZER_KINDS[settings["kind"]]
    arguments = {
        name: settings[name] for name in ("lower_case", "normalization_form") if name in settings
    }
    source_file, target_file = tokenizer_files(settings)
    for side, filename in (("source", source_file), ("target", target_file)):
        if not (run_dir / filename).is_file():
            raise FileNotFoundError(
                f"{run_dir / filename} is missing: it holds the run's {side} tokenizer "
                f"({settings['kind']}, as {CONFIG_FILE} says)."
            )
    if settings["kind"] == "multilingual":
        # One file; each side frames its rows with its own language, if the run has one.
        return tuple(
            tokenizer_class(
                run_dir / source_file,
                language=settings.get(f"{side}_language"),
                name=f"{side}_tokenizer",
            )
            for side in ("source", "target")
        )
    if source_file == target_file:
        joint = tokenizer_class(run_dir / source_file, **arguments, name="joint_tokenizer")
        return joint, joint
    return (
        tokenizer_class(run_dir / source_file, **arguments, name="source_tokenizer"),
        tokenizer_class(run_dir / target_file, **arguments, name="target_tokenizer"),
    )


def load_tokenizers(run_dir: str | os.PathLike):
    """The run's (source, target) tokenizers, of the kind its config.json names.

    A run directory from before SentencePiece (no "kind", vocab_source.txt and
    vocab_target.txt) loads as WordPiece. A tokenizer file that is missing or
    not the run's own (another SHA-256 than config.json records, or another
    vocabulary size than the model's) raises an error naming it.
    """
    run_dir = Path(run_dir)
    config = read_config(run_dir)
    settings = tokenizer_settings(config)
    tokenizers = make_tokenizers(run_dir, settings)
    _check_tokenizer_files(run_dir, config, settings)
    _check_vocab_sizes(run_dir, config, settings, tokenizers)
    return tokenizers


def check_tokenizer_files(run_dir: str | os.PathLike) -> None:
    """The run's tokenizer files are there and are the ones its config.json records.

    `load_tokenizers` checks this too; this check needs no TensorFlow (a run
    training from prepared data reads no tokenizer).
    """
    run_dir = Path(run_dir)
    config = read_config(run_dir)
    _check_tokenizer_files(run_dir, config, tokenizer_settings(config))


def load_model(
    run_dir: str | os.PathLike,
    checkpoint: str = BEST_CHECKPOINT,
    average_last: int | None = None,
    dtype: str | None = "float32",
):
    """The run's Transformer from `checkpoint` (best by validation loss by default), or
    with `average_last=N` the average of its last N epoch checkpoints, computing in `dtype`.

    float32 by default whatever the run trained under: mixed precision is a training
    lever, and an export of a `mixed_bfloat16` run would otherwise decode in bfloat16,
    whose 8-bit mantissa can reorder close beam hypotheses and which CPUs without
    AVX512-BF16 or AMX emulate slowly. A mixed policy name ("mixed_float16",
    "mixed_bfloat16") computes in 16 bits; None keeps the policy the run trained under
    (`checkpoints.with_dtype`).
    """
    if average_last:
        kept = epoch_checkpoints(run_dir)
        if len(kept) < average_last:
            raise ValueError(
                f"Cannot average the last {average_last} epochs: {Path(run_dir) / CHECKPOINT_DIR} "
                f"keeps {len(kept)} epoch checkpoints (train with --keep-epoch-checkpoints N)."
            )
        model = checkpoints.average(kept[-average_last:])
    else:
        path = Path(run_dir) / checkpoint
        if not path.is_file():
            raise FileNotFoundError(f"No checkpoint at {path}: has the run finished an epoch?")
        model = checkpoints.load_model(path)
    return model if dtype is None else checkpoints.with_dtype(model, dtype)


def load_run(
    run_dir: str | os.PathLike,
    checkpoint: str = BEST_CHECKPOINT,
    average_last: int | None = None,
    dtype: str | None = "float32",
):
    """(model, source_tokenizer, target_tokenizer, config) of a finished run; the model
    as `load_model` gives it."""
    source, target = load_tokenizers(run_dir)
    model = load_model(run_dir, checkpoint, average_last, dtype)
    return model, source, target, read_config(run_dir)
