"""`train()`: a Transformer trained from a `TrainConfig` into a run directory.

The pieces live in their own modules (`schedules`, `losses`, `metrics`,
`config`, `callbacks`); their public names are importable from the package
(`keras_transformer.training`), as users of earlier versions and of the
TensorFlow tutorial know them.

It stays one module because it is one concept, a run's start, step by step, each a
function of its own: reading the data (text or prepared), its tokenizers, the checks
that a resumed run is the same run, the batches, and the model compiled for `fit`.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
from pathlib import Path

import keras

from keras_transformer import atomic
from keras_transformer.models.transformer import Transformer
from keras_transformer.text import prepared
from keras_transformer.training import distribute, start_from
from keras_transformer.training import run_dir as run_dir_lib
from keras_transformer.training.callbacks import make_callbacks
from keras_transformer.training.config import TrainConfig, with_prepared_tokenizer
from keras_transformer.training.config_checks import TRAINING_DATA_PATHS
from keras_transformer.training.losses import MaskedLoss
from keras_transformer.training.metrics import MaskedAccuracy, TargetTokens
from keras_transformer.training.schedules import (
    make_optimizer,
    make_schedule,
)

try:  # text is tokenized in TensorFlow graphs; prepared data trains without TensorFlow
    import tensorflow as tf
except ImportError:
    tf = None
try:
    from keras_transformer.text import corpora, data
    from keras_transformer.text.tokenizers import (
        learn_sentencepiece_model,
        learn_vocabulary,
        write_sentencepiece_model,
        write_vocabulary,
    )
except ImportError as missing:
    if missing.name not in ("tensorflow", "tensorflow_text"):
        raise
    corpora = None  # training from text is refused, saying why (TEXT_NEEDS_TENSORFLOW)

TEXT_NEEDS_TENSORFLOW = (
    "Training from text needs TensorFlow and tensorflow-text (the tokenizers run in "
    "TensorFlow graphs), which are not installed here. Prepare the data where they are "
    "(keras-transformer prepare) and train from it here (--data DIR)."
)


MIXED_PRECISION_POLICIES = {"none": None, "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}
JIT_COMPILE = {"auto": "auto", "true": True, "false": False}


def build_tokenizers(config: TrainConfig, train_pairs, run_dir: Path):
    """The run's (source, target) tokenizers, learned from the training text once.

    Each model or vocabulary file is learned when run_dir lacks it and reused
    when it is there (a resumed run), so every epoch of a run sees the same
    ids. Files are written under a temporary name and renamed into place: a
    kill mid-write leaves no half file behind. With `shared_vocab` one model
    is learned from both sides and the same tokenizer is returned twice.
    """
    settings = run_dir_lib.tokenizer_settings({"tokenizer": config.tokenizer_kwargs()})
    source_file, target_file = run_dir_lib.tokenizer_files(settings)
    sides_of_file = {source_file: [0], target_file: [1]}
    if source_file == target_file:
        sides_of_file = {source_file: [0, 1]}
    for filename, sides in sides_of_file.items():
        path = run_dir / filename
        if not path.is_file():
            learn_tokenizer_file(config, _training_texts(train_pairs, sides), path)
    return run_dir_lib.make_tokenizers(run_dir, settings)


def _training_texts(train_pairs, sides: list[int]):
    """The training sentences of `sides` (0: source, 1: target), one after the other."""
    texts = [corpora.texts(train_pairs, side) for side in sides]
    if isinstance(texts[0], tf.data.Dataset):
        joined = texts[0]
        for more in texts[1:]:
            joined = joined.concatenate(more)
        return joined
    return [sentence for side_texts in texts for sentence in side_texts]


def learn_tokenizer_file(config: TrainConfig, texts, path: Path) -> None:
    """Learns the tokenizer `config` asks for from `texts` and writes it to `path`."""
    if config.tokenizer == "sentencepiece":
        model = learn_sentencepiece_model(
            texts,
            vocab_size=config.vocab_size,
            model_type=config.subword_model,
            lower_case=config.lower_case,
            normalization_form=config.normalization_form,
        )
        write_sentencepiece_model(model, path)
    else:
        vocab = learn_vocabulary(
            texts,
            vocab_size=config.vocab_size,
            lower_case=config.lower_case,
            normalization_form=config.normalization_form,
            lower_thresh=config.vocab_lower_thresh,
        )
        write_vocabulary(vocab, path)


def _copy_prepared_tokenizers(prepared_data: prepared.PreparedData, run_dir: Path, settings):
    """Copies the prepared data's tokenizer files into the run directory.

    A run that has them already (resumed) must have the very files the data was
    prepared with: ids mean nothing under another tokenizer.
    """
    names = sorted(set(run_dir_lib.tokenizer_files(settings)))
    have = [name for name in names if (run_dir / name).is_file()]
    prepared_data.check_tokenizer_files(
        {name: prepared.file_sha256(run_dir / name) for name in have}, str(run_dir)
    )
    for name in names:
        if name not in have:
            source = prepared_data.directory / name
            atomic.write_atomically(
                run_dir / name, lambda partial, source=source: shutil.copyfile(source, partial)
            )


def _prepared_batches(prepared_data, config: TrainConfig, strategy, batch_args: dict):
    """(training, validation) batches from prepared data, for `fit`.

    Under a multi-worker strategy each worker reads its own shards (every
    workers-th one) and makes batches of 1/workers of the configured size, and
    all workers take as many steps an epoch as the one with the fewest batches.
    On TensorFlow the batches go through tf.data, whose prefetching overlaps
    them with the steps (and whose per-worker datasets a strategy distributes).
    """
    workers = distribute.num_workers(strategy)
    worker_args = dict(batch_args)
    if workers > 1:
        worker_args["batch_size"] = max(1, batch_args["batch_size"] // workers)
        if batch_args["batch_tokens"]:
            worker_args["batch_tokens"] = max(1, batch_args["batch_tokens"] // workers)

    def training_batches(worker: int, num_batches: int | None = None):
        return prepared.PreparedBatches(
            prepared_data.split("train", worker, workers),
            shuffle=True,
            seed=config.seed,
            repeat=bool(config.steps_per_epoch),
            num_batches=num_batches,
            **worker_args,
        )

    fewest = min(len(training_batches(w)) for w in range(workers)) if workers > 1 else None
    val_batches = prepared.PreparedBatches(
        prepared_data.split("validation"), shuffle=False, **batch_args
    )
    if keras.backend.backend() != "tensorflow":
        return training_batches(0), val_batches
    if workers == 1:
        return tf_dataset(training_batches(0)), tf_dataset(val_batches)
    train_batches = strategy.distribute_datasets_from_function(
        lambda context: tf_dataset(training_batches(context.input_pipeline_id, fewest))
    )
    return train_batches, distribute.shard_by_data(tf_dataset(val_batches))


def tf_dataset(batches: prepared.PreparedBatches):
    """`batches` as a tf.data dataset of known cardinality: a new epoch at every pass."""
    epochs = itertools.count()

    def generate():
        if batches.repeat:  # one endless pass: the index counts the epochs
            yield from (batches[index] for index in itertools.count())
        else:
            epoch = next(epochs)
            yield from (batches.batch_of(epoch, position) for position in range(len(batches)))

    ids = tf.TensorSpec([None, None], tf.int32)
    dataset = tf.data.Dataset.from_generator(generate, output_signature=((ids, ids), ids))
    if not batches.repeat:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(batches)))
    return dataset.prefetch(tf.data.AUTOTUNE)


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
    run_dir = Path(run_dir)
    keras.utils.set_random_seed(config.seed)
    # Read first: a missing or unreadable corpus leaves no run directory behind.
    if config.corpus == "prepared":
        prepared_data = prepared.PreparedData(config.data)
        train_pairs = val_pairs = None
    elif corpora is None:
        raise ImportError(TEXT_NEEDS_TENSORFLOW, name="tensorflow_text")
    else:
        prepared_data = None
        train_pairs, val_pairs = corpora.load_corpus(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    # What writers killed mid-write left (the real files are whole: see atomic.py).
    atomic.remove_partial_files(
        run_dir, run_dir / run_dir_lib.CHECKPOINT_DIR, run_dir / run_dir_lib.BACKUP_DIR
    )
    names = ("corpus", "src", "tgt", "tsv", "data", "tfds_name", "demo_pairs", "demo_languages")
    data_settings = {name: getattr(config, name) for name in names}
    run_config = {"tokenizer": config.tokenizer_kwargs(), "data": data_settings}
    settings = run_dir_lib.tokenizer_settings(run_config)
    if (run_dir / run_dir_lib.CONFIG_FILE).is_file():
        # A run that has started: the same data and tokenizers, checked before anything
        # is learned. Its tokenizer files must be there and be its own (they are
        # written before config.json), never learned again or taken from another run.
        _check_same_run(run_dir, run_config)
        if prepared_data is None:
            run_dir_lib.load_tokenizers(run_dir)
        else:
            run_dir_lib.check_tokenizer_files(run_dir)
    else:
        # Tokenizer files without config.json are a start's that stopped before it, from
        # whatever corpus and settings it had: learned again, not trusted.
        for filename in set(run_dir_lib.tokenizer_files(settings)):
            (run_dir / filename).unlink(missing_ok=True)
        if config.init_from and prepared_data is None:
            start_from.copy_tokenizers(Path(config.init_from), run_dir, settings)
    if prepared_data is not None:
        _copy_prepared_tokenizers(prepared_data, run_dir, settings)
        vocab_sizes = prepared_data.vocab_sizes
    else:
        source_tokenizer, target_tokenizer = build_tokenizers(config, train_pairs, run_dir)
        vocab_sizes = (source_tokenizer.vocab_size, target_tokenizer.vocab_size)
    model_kwargs = config.model_kwargs(*vocab_sizes)
    _check_same_run(run_dir, {"model": model_kwargs})  # data and tokenizers checked above
    run_config = {"model": model_kwargs, **run_config, "training": dataclasses.asdict(config)}
    run_config["files"] = run_dir_lib.tokenizer_fingerprints(run_dir, settings)
    run_dir_lib.write_config(run_dir, run_config)

    batch_args = dict(
        batch_size=config.batch_size,
        max_tokens=config.max_tokens,
        batch_tokens=config.batch_tokens,
        overlong=config.overlong,
    )
    if prepared_data is not None:
        train_batches, val_batches = _prepared_batches(prepared_data, config, strategy, batch_args)
    else:
        train_batches = data.make_batches(
            train_pairs,
            source_tokenizer,
            target_tokenizer,
            shuffle=True,
            shuffle_buffer=config.shuffle_buffer,
            seed=config.seed,
            subword_alpha=config.subword_alpha,
            **batch_args,
        )
        val_batches = data.make_batches(
            val_pairs, source_tokenizer, target_tokenizer, shuffle=False, **batch_args
        )
        if config.steps_per_epoch:
            train_batches = train_batches.repeat()
        # Workers share batches (one corpus, not one file per worker); a no-op on one machine.
        train_batches = distribute.shard_by_data(train_batches)
        val_batches = distribute.shard_by_data(val_batches)

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
        shuffle=False,  # make_batches shuffles
    )
    return _whole_run_history(history, run_dir)
