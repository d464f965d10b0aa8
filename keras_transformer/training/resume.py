"""Opening a run directory: a new run started, or a started run resumed as the same run.

A run directory holds one run. Started again, it resumes only with the same model,
tokenizer and data settings, and its own tokenizer files, checked before anything
is learned; tokenizer files that a start left without config.json (killed before
writing it) came from whatever corpus and settings it had, and are made again.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from keras_transformer import atomic
from keras_transformer.training import run_dir as run_dir_lib
from keras_transformer.training.config import TrainConfig
from keras_transformer.training.config_checks import TRAINING_DATA_PATHS
from keras_transformer.training.data_sources import DataSource

# The TrainConfig fields of config.json's "data" section.
DATA_SETTINGS = ("corpus", "src", "tgt", "tsv", "data", "tfds_name", "demo_pairs", "demo_languages")


def open_run(run_dir: Path, config: TrainConfig, source: DataSource) -> dict:
    """Creates `run_dir` for `config`, or resumes the run it holds, with `source`'s
    tokenizer files, and writes its config.json; returns what it wrote (the model's
    settings under "model").

    A resumed run with other settings is refused with a ValueError naming what
    changed: the data and tokenizer settings before any tokenizer is learned.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    # What writers killed mid-write left (the real files are whole: see atomic.py).
    atomic.remove_partial_files(
        run_dir, run_dir / run_dir_lib.CHECKPOINT_DIR, run_dir / run_dir_lib.BACKUP_DIR
    )
    data_settings = {name: getattr(config, name) for name in DATA_SETTINGS}
    run_config = {"tokenizer": config.tokenizer_kwargs(), "data": data_settings}
    settings = run_dir_lib.tokenizer_settings(run_config)
    # Tokenizer files are written before config.json: with it, the run has started.
    resumed = (run_dir / run_dir_lib.CONFIG_FILE).is_file()
    if resumed:
        _check_same_run(run_dir, run_config)
    else:
        for filename in set(run_dir_lib.tokenizer_files(settings)):
            (run_dir / filename).unlink(missing_ok=True)
    model_kwargs = config.model_kwargs(*source.write_tokenizers(run_dir, resumed))
    _check_same_run(run_dir, {"model": model_kwargs})  # data and tokenizers checked above
    run_config = {"model": model_kwargs, **run_config, "training": dataclasses.asdict(config)}
    run_config["files"] = run_dir_lib.tokenizer_fingerprints(run_dir, settings)
    run_dir_lib.write_config(run_dir, run_config)
    return run_config


def _same_file(a: str | None, b: str | None) -> bool:
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    if os.path.normpath(a) == os.path.normpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # either is missing
        return False


def _check_same_run(run_dir: Path, run_config: dict) -> None:
    """The sections of `run_config` equal those the run in `run_dir` recorded, if any."""
    if not (run_dir / run_dir_lib.CONFIG_FILE).is_file():
        return
    old = run_dir_lib.read_config(run_dir)
    # Runs from earlier versions list fewer model options: those they lack had
    # their default value.
    defaults = TrainConfig().model_kwargs(0, 0)
    old["model"] = {**defaults, **old.get("model", {})}
    # Their tokenizer section does not name its kind (WordPiece, one vocabulary a side).
    old["tokenizer"] = run_dir_lib.tokenizer_settings(old)
    if "data" in run_config and isinstance(old.get("data"), dict):
        # A corpus file named another way (./train.pt, or its absolute path) is the same.
        old["data"] = {
            key: run_config["data"][key]
            if key in TRAINING_DATA_PATHS and _same_file(value, run_config["data"].get(key))
            else value
            for key, value in old["data"].items()
        }
    for section in ("model", "tokenizer", "data"):
        if section not in run_config or old.get(section) == run_config[section]:
            continue
        was, now = old.get(section) or {}, run_config[section]
        changes = ", ".join(
            f"{key} {was.get(key)!r} -> {now.get(key)!r}"
            for key in sorted(set(was) | set(now))
            if was.get(key) != now.get(key)
        )
        raise ValueError(
            f"{run_dir} holds a run with different {section} settings ({changes}); use "
            "another run directory to start a new run."
        )
