"""An imported checkpoint as an ordinary run directory: what every importer writes.

The run directory holds what a training run leaves for `export`, `translate`,
`evaluate`, `score` and `train --init-from`: config.json (the model's settings, the
tokenizer kind, a "pretrained" section naming the checkpoint and its family, and the
checkpoint's decoding settings under "generation"), the tokenizer files and
checkpoints/best.keras. It is written in a temporary directory beside the run
directory and renamed into place whole: a failure leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

from keras_transformer.pretrained import generation
from keras_transformer.pretrained.checkpoint_error import CheckpointError
from keras_transformer.training import checkpoints
from keras_transformer.training import run_dir as run_dir_lib
from keras_transformer.training.config import TrainConfig


@dataclasses.dataclass
class PretrainedModel:
    """An imported checkpoint: the library's model, tokenizers and settings.

    Attributes:
        model: the `Transformer`, built, with the checkpoint's weights.
        source_tokenizer: the source side's tokenizer.
        target_tokenizer: the target side's (the same object for one vocabulary).
        config: the Transformer's constructor arguments (`Transformer(**config)`).
        family: "marian", "m2m_100" or "mbart".
        tokenizer_kind: the run directory's tokenizer kind ("marian", "multilingual").
        max_tokens: the longest source the checkpoint takes, in tokens.
        generation: the checkpoint's decoding settings (the run's "generation").
    """

    model: object
    source_tokenizer: object
    target_tokenizer: object
    config: dict
    family: str = "marian"
    tokenizer_kind: str = "marian"
    max_tokens: int | None = None
    generation: dict = dataclasses.field(default_factory=dict)


def checkpoint_generation(directory: str | os.PathLike) -> dict:
    """The checkpoint's decoding settings (`generation.decoding_settings`), as a run
    records them: the library's settings its export decodes with by default, what the
    searches cannot honour ("unsupported"), the file read ("source") and the
    checkpoint's own token-id settings for the record ("checkpoint_ids": its ids, not
    the library's). A settings file that cannot be read is a CheckpointError."""
    try:
        return generation.decoding_settings(directory)
    except ValueError as error:
        raise CheckpointError(f"{Path(directory)}: {error}") from None


def import_run(load, directory: str | os.PathLike, run_dir: str | os.PathLike) -> Path:
    """`load(directory)` written as the run directory `run_dir` (which must not exist,
    or be empty); returns its path."""
    run_dir = Path(run_dir)
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise CheckpointError(f"{run_dir} exists and is not empty: import into a new directory.")
    imported = load(directory)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{run_dir.name}.partial-", dir=run_dir.parent))
    try:
        _write_run(imported, Path(directory), partial)
        if run_dir.exists():
            run_dir.rmdir()  # empty, checked above
        partial.rename(run_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return run_dir


def _write_run(imported: PretrainedModel, checkpoint: Path, run_dir: Path) -> None:
    source_file, target_file, joint_file = run_dir_lib.TOKENIZER_FILES[imported.tokenizer_kind]
    if imported.source_tokenizer is imported.target_tokenizer:
        imported.source_tokenizer.save(run_dir / joint_file)
    else:
        imported.source_tokenizer.save(run_dir / source_file)
        imported.target_tokenizer.save(run_dir / target_file)
    model_kwargs = imported.config
    settings = {
        name: value
        for name, value in model_kwargs.items()
        if name not in ("input_vocab_size", "target_vocab_size")
    }
    training = TrainConfig(
        tokenizer=imported.tokenizer_kind,
        max_tokens=imported.max_tokens,
        shared_vocab=imported.source_tokenizer is imported.target_tokenizer,
        **settings,
    )
    tokenizer_settings = training.tokenizer_kwargs()
    run_config = {
        "model": model_kwargs,
        "tokenizer": tokenizer_settings,
        "training": dataclasses.asdict(training),
        "pretrained": {"kind": imported.family, "checkpoint": str(checkpoint.resolve())},
        "generation": imported.generation,
        "files": run_dir_lib.tokenizer_fingerprints(run_dir, tokenizer_settings),
    }
    run_dir_lib.write_config(run_dir, run_config)
    (run_dir / run_dir_lib.CHECKPOINT_DIR).mkdir()
    checkpoints.save_checkpoint(imported.model, run_dir / run_dir_lib.BEST_CHECKPOINT)
