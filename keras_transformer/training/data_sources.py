"""Where a run's data comes from: text, tokenized as it is batched, or prepared data,
ids tokenized once by `prepare`.

A source gives the run its tokenizer files (`write_tokenizers`: learned or copied into
the run directory, and checked when the run resumes), the vocabulary sizes its model is
built for, and the (training, validation) batches `fit` takes. `data_source(config)`
chooses the source and reads the data before the run directory is made, so that a
missing or unreadable corpus leaves none behind.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import keras

from keras_transformer.text import prepared
from keras_transformer.training import distribute
from keras_transformer.training import run_dir as run_dir_lib
from keras_transformer.training.config import TrainConfig
from keras_transformer.training.tokenizer_files import build_tokenizers, copy_tokenizer_files

try:  # text is tokenized in TensorFlow graphs; prepared data trains without TensorFlow
    import tensorflow as tf
except ImportError:
    tf = None
try:
    from keras_transformer.text import corpora, data
except ImportError as missing:
    if missing.name not in ("tensorflow", "tensorflow_text"):
        raise
    corpora = None  # training from text is refused, saying why (TEXT_NEEDS_TENSORFLOW)

TEXT_NEEDS_TENSORFLOW = (
    "Training from text needs TensorFlow and tensorflow-text (the tokenizers run in "
    "TensorFlow graphs), which are not installed here. Prepare the data where they are "
    "(keras-transformer prepare) and train from it here (--data DIR)."
)


def _batch_args(config: TrainConfig) -> dict:
    return dict(
        batch_size=config.batch_size,
        max_tokens=config.max_tokens,
        batch_tokens=config.batch_tokens,
        overlong=config.overlong,
    )


def _tokenizer_settings(config: TrainConfig) -> dict:
    return run_dir_lib.tokenizer_settings({"tokenizer": config.tokenizer_kwargs()})


class TextSource:
    """The corpus `config` names (files, tsv, tfds or demo), read whole.

    Its tokenizer files are learned from the training text; a run that starts from
    another (`init_from`: an imported checkpoint, or any run) copies that run's
    instead, never learning them: the ids must mean what its weights learned.
    """

    def __init__(self, config: TrainConfig):
        self.config = config
        self.train_pairs, self.val_pairs = corpora.load_corpus(config)
        self.tokenizers = None  # (source, target), once written into the run directory

    def write_tokenizers(self, run_dir: Path, resumed: bool) -> tuple[int, int]:
        """Learns or copies the tokenizer files `run_dir` lacks; returns the (source,
        target) vocabulary sizes. A resumed run's files must be there and be its own
        (checked): they are never learned again or taken from another run."""
        if resumed:
            run_dir_lib.load_tokenizers(run_dir)
        elif self.config.init_from:
            initial = Path(self.config.init_from)
            run_dir_lib.check_tokenizer_files(initial)
            copy_tokenizer_files(initial, run_dir, _tokenizer_settings(self.config))
        self.tokenizers = build_tokenizers(self.config, self.train_pairs, run_dir)
        return tuple(tokenizer.vocab_size for tokenizer in self.tokenizers)

    def batches(self, strategy):
        """(training, validation) batches for `fit`, tokenized by the run's tokenizers;
        under a multi-worker strategy the workers share them (one corpus, not one file
        per worker)."""
        config, batch_args = self.config, _batch_args(self.config)
        train_batches = data.make_batches(
            self.train_pairs,
            *self.tokenizers,
            shuffle=True,
            shuffle_buffer=config.shuffle_buffer,
            seed=config.seed,
            subword_alpha=config.subword_alpha,
            **batch_args,
        )
        val_batches = data.make_batches(
            self.val_pairs, *self.tokenizers, shuffle=False, **batch_args
        )
        if config.steps_per_epoch:
            train_batches = train_batches.repeat()
        # A no-op on one machine.
        return distribute.shard_by_data(train_batches), distribute.shard_by_data(val_batches)


class PreparedSource:
    """A prepared directory (`config.data`): token ids and the tokenizer files they
    were made with, which the run copies."""

    def __init__(self, config: TrainConfig):
        self.config = config
        self.data = prepared.PreparedData(config.data)

    def write_tokenizers(self, run_dir: Path, resumed: bool) -> tuple[int, int]:
        """Copies the prepared data's tokenizer files into `run_dir`; returns the (source,
        target) vocabulary sizes. A resumed run's files must be its own and the very
        files the data was prepared with: ids mean nothing under another tokenizer."""
        if resumed:
            run_dir_lib.check_tokenizer_files(run_dir)
        settings = _tokenizer_settings(self.config)
        names = sorted(set(run_dir_lib.tokenizer_files(settings)))
        have = [name for name in names if (run_dir / name).is_file()]
        self.data.check_tokenizer_files(
            {name: prepared.file_sha256(run_dir / name) for name in have}, str(run_dir)
        )
        copy_tokenizer_files(self.data.directory, run_dir, settings)
        return self.data.vocab_sizes

    def batches(self, strategy):
        """(training, validation) batches from the prepared ids, for `fit`.

        Under a multi-worker strategy each worker reads its own shards (every
        workers-th one) and makes batches of 1/workers of the configured size, and
        all workers take as many steps an epoch as the one with the fewest batches.
        On TensorFlow the batches go through tf.data, whose prefetching overlaps
        them with the steps (and whose per-worker datasets a strategy distributes).
        """
        config, batch_args = self.config, _batch_args(self.config)
        workers = distribute.num_workers(strategy)
        worker_args = dict(batch_args)
        if workers > 1:
            worker_args["batch_size"] = max(1, batch_args["batch_size"] // workers)
            if batch_args["batch_tokens"]:
                worker_args["batch_tokens"] = max(1, batch_args["batch_tokens"] // workers)

        def training_batches(worker: int, num_batches: int | None = None):
            return prepared.PreparedBatches(
                self.data.split("train", worker, workers),
                shuffle=True,
                seed=config.seed,
                repeat=bool(config.steps_per_epoch),
                num_batches=num_batches,
                **worker_args,
            )

        fewest = min(len(training_batches(w)) for w in range(workers)) if workers > 1 else None
        val_batches = prepared.PreparedBatches(
            self.data.split("validation"), shuffle=False, **batch_args
        )
        if keras.backend.backend() != "tensorflow":
            return training_batches(0), val_batches
        if workers == 1:
            return tf_dataset(training_batches(0)), tf_dataset(val_batches)
        train_batches = strategy.distribute_datasets_from_function(
            lambda context: tf_dataset(training_batches(context.input_pipeline_id, fewest))
        )
        return train_batches, distribute.shard_by_data(tf_dataset(val_batches))


DataSource = TextSource | PreparedSource


def data_source(config: TrainConfig) -> DataSource:
    """The source of the data `config` names, its data read (prepared data: its index
    and shards checked; text: the corpus loaded)."""
    if config.corpus == "prepared":
        return PreparedSource(config)
    if corpora is None:
        raise ImportError(TEXT_NEEDS_TENSORFLOW, name="tensorflow_text")
    return TextSource(config)


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
