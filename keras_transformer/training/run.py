"""`train()`: a Transformer trained from a `TrainConfig` into a run directory.

It reads top to bottom: the settings completed and checked, the data source
(`data_sources`: text or prepared data, which gives the tokenizers, the vocabulary
sizes and the batches), the run directory opened or resumed (`resume`), the model
built and compiled, then `fit`. The pieces live in their own modules (`schedules`,
`losses`, `metrics`, `config`, `callbacks`); their public names are importable from
the package (`keras_transformer.training`), as users of earlier versions and of the
TensorFlow tutorial know them.
"""

from __future__ import annotations

import os
from pathlib import Path

import keras

from keras_transformer.models.transformer import Transformer
from keras_transformer.training import distribute, start_from
from keras_transformer.training import run_dir as run_dir_lib
from keras_transformer.training.callbacks import make_callbacks
from keras_transformer.training.config import TrainConfig, with_prepared_tokenizer
from keras_transformer.training.data_sources import data_source
from keras_transformer.training.losses import MaskedLoss
from keras_transformer.training.metrics import MaskedAccuracy, TargetTokens
from keras_transformer.training.resume import open_run
from keras_transformer.training.schedules import (
    make_optimizer,
    make_schedule,
)

MIXED_PRECISION_POLICIES = {"none": None, "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}
JIT_COMPILE = {"auto": "auto", "true": True, "false": False}


def train(
    config: dict | TrainConfig,
    run_dir: str | os.PathLike,
    verbose: str | int = "auto",
    callbacks: list[keras.callbacks.Callback] | None = None,
) -> keras.callbacks.History:
    """Trains a Transformer as `config` says and fills `run_dir` (see run_dir.py).

    Started again on the same run directory, it resumes from the last
    completed epoch (backup.py) and reuses the vocabularies. The
    returned History holds every epoch of the run, earlier processes included.

    Args:
        config: a `TrainConfig`, or a dict of its settings
            (`TrainConfig.from_dict`: without a `corpus`, the data paths given
            choose it). Checked whole (`TrainConfig.validate`) before anything
            is read or written. From prepared data, the tokenizer settings are
            those it was prepared with (`with_prepared_tokenizer`): a setting the
            dict names, or that a `TrainConfig` holds other than its default, must
            equal them.
        run_dir: the run directory, created if missing; a run directory
            holding a run resumes it, with the same data and tokenizers. With
            `init_from` (fine-tuning an imported checkpoint, or any run), the
            model starts from that run's best checkpoint, with its settings and
            a copy of its tokenizer files.
        verbose: `model.fit`'s display: "auto", 0, 1 or 2. Defaults to "auto".
        callbacks: more Keras callbacks, which run after the run's own
            (checkpoints, backup, history, ...). Defaults to None.

    Returns:
        the run's `keras.callbacks.History`, every epoch of the run included.
    """
    config, strategy = _settings(config)
    keras.utils.set_random_seed(config.seed)
    source = data_source(config)  # read first: a missing corpus leaves no run directory
    run_dir = Path(run_dir)
    run_config = open_run(run_dir, config, source)
    train_batches, val_batches = source.batches(strategy)
    model, schedule = _compiled_model(config, run_config["model"], strategy)
    # What a best checkpoint of an earlier version, which does not record its
    # validation loss, counts as (see callbacks.Checkpoint).
    past = run_dir_lib.read_history(run_dir)
    best = min((e["val_loss"] for e in past if "val_loss" in e), default=None)
    history = model.fit(
        train_batches,
        validation_data=val_batches,
        epochs=config.epochs,
        steps_per_epoch=config.steps_per_epoch,
        callbacks=make_callbacks(
            run_dir,
            best,
            config.time_budget_minutes,
            config.early_stopping_patience,
            config.keep_epoch_checkpoints,
            cooldown_schedule=schedule if config.lr_cooldown else None,
            epochs=config.epochs,
        )
        + list(callbacks or []),
        verbose=verbose,
        shuffle=False,  # the sources shuffle
    )
    return _whole_run_history(history, run_dir)


def _settings(config: dict | TrainConfig):
    """(the run's `TrainConfig`, checked whole, and its distribution strategy)."""
    if isinstance(config, dict):
        given = set(config)
        config = TrainConfig.from_dict(config)
    else:
        given = config.given_settings()
    if config.init_from:
        config = start_from.settings_of_initial_run(config)
    # First: a multi-worker strategy configures TensorFlow's collective ops, which must
    # happen before any tensor is made (the settings check builds a model).
    strategy = distribute.get_strategy(config.strategy)
    # Prepared data holds its tokenizer: the run takes its settings (reads index.json alone).
    config = with_prepared_tokenizer(config, given)
    config.validate()
    return config, strategy


def _compiled_model(config: TrainConfig, model_kwargs: dict, strategy):
    """(the model, built and compiled for `fit` in `strategy`'s scope, and its
    learning-rate schedule); a run started from another takes that run's weights."""
    with strategy.scope():
        model = Transformer(
            **model_kwargs,
            **config.step_kwargs(),
            dtype=MIXED_PRECISION_POLICIES[config.mixed_precision],
        )
        schedule = make_schedule(
            config.d_model, config.warmup_steps, config.learning_rate, config.lr_cooldown
        )
        model.compile(
            optimizer=make_optimizer(
                config.d_model,
                learning_rate=schedule,
                weight_decay=config.weight_decay,
                clip_norm=config.clip_norm,
            ),
            loss=MaskedLoss(config.label_smoothing),
            metrics=[MaskedAccuracy(), TargetTokens()],
            jit_compile=JIT_COMPILE[config.jit_compile],
        )
        # The backup (RunBackup) needs a built model to restore into.
        ones = keras.ops.ones((1, 4), "int32")
        model((ones, ones), training=False)
        if config.init_from:  # a resumed run's backup then restores its own weights
            start_from.load_weights(model, Path(config.init_from))
    return model, schedule


def _whole_run_history(history: keras.callbacks.History, run_dir: Path):
    """`history` holding every epoch of the run, earlier processes' included."""
    entries = run_dir_lib.read_history(run_dir)
    history.epoch = [e["epoch"] - 1 for e in entries]
    history.history = (
        {key: [e.get(key) for e in entries] for key in entries[-1] if key != "epoch"}
        if entries
        else {}
    )
    return history
