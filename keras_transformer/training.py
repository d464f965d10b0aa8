"""Training: the warmup schedule, masked loss and accuracy, callbacks and `train()`."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import keras
import tensorflow as tf

from keras_transformer import distribute
from keras_transformer import run_dir as run_dir_lib
from keras_transformer.distribute import global_token_mean
from keras_transformer.model import Transformer
from keras_transformer.tokenizers import (
    PAD_ID,
    Tokenizer,
    learn_vocabulary,
    write_vocabulary,
)


@keras.saving.register_keras_serializable(package="keras_transformer")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lr = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (paper, eq. 3).

    Rises linearly for `warmup_steps`, then decays as 1/sqrt(step). Step 0 is
    treated as step 1 (0^-0.5 would be infinite).

    Args:
        d_model: int. Model feature size.
        warmup_steps: int. Defaults to 4000.
    """

    def __init__(self, d_model, warmup_steps=4000):
        super().__init__()
        if d_model <= 0 or warmup_steps <= 0:
            raise ValueError(
                "d_model and warmup_steps must be positive. "
                f"Received: d_model={d_model}, warmup_steps={warmup_steps}"
            )
        self.d_model = d_model
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = tf.maximum(tf.cast(step, tf.float32), 1.0)
        d_model = tf.cast(self.d_model, tf.float32)
        return tf.math.rsqrt(d_model) * tf.minimum(
            tf.math.rsqrt(step), step * self.warmup_steps**-1.5
        )

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps}


# The tutorial's name for the schedule.
CustomSchedule = WarmupSchedule


def make_optimizer(d_model, warmup_steps=4000):
    """Adam with the paper's settings and the warmup schedule."""
    return keras.optimizers.Adam(
        WarmupSchedule(d_model, warmup_steps), beta_1=0.9, beta_2=0.98, epsilon=1e-9
    )


def token_losses(label, pred, label_smoothing=0.0):
    """Per-token cross entropy `(batch, length)` in float32 (zero at padding)."""
    pred = tf.cast(pred, tf.float32)
    label = tf.cast(label, tf.int32)
    if label_smoothing:
        depth = tf.shape(pred)[-1]
        onehot = tf.one_hot(label, depth, dtype=tf.float32)
        smoothed = onehot * (1.0 - label_smoothing) + label_smoothing / tf.cast(depth, tf.float32)
        loss = tf.nn.softmax_cross_entropy_with_logits(smoothed, pred)
    else:
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(label, pred)
    mask = tf.cast(label != PAD_ID, tf.float32)
    return loss * mask, mask


@keras.saving.register_keras_serializable(package="keras_transformer")
def masked_loss(label, pred, label_smoothing=0.0):
    """Mean cross entropy over real (non-padding) target tokens, in float32.

    Under a `tf.distribute` strategy with several replicas it is the mean over
    the real tokens of the *global* batch (see `distribute.global_token_mean`),
    not the mean of the replicas' means.

    Args:
        label: int `(batch, length)`, 0 at padding.
        pred: logits `(batch, length, vocab)`.
        label_smoothing: float. Mass spread uniformly over the vocabulary
            (the paper uses 0.1). Defaults to 0.
    """
    loss, mask = token_losses(label, pred, label_smoothing)
    return global_token_mean(tf.reduce_sum(loss), tf.reduce_sum(mask))


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedLoss(keras.losses.Loss):
    """`masked_loss` as a configurable Keras loss (serializable with the model)."""

    def __init__(self, label_smoothing=0.0, name="masked_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        return masked_loss(y_true, y_pred, self.label_smoothing)

    def get_config(self):
        return {"label_smoothing": self.label_smoothing, "name": self.name}


@keras.saving.register_keras_serializable(package="keras_transformer")
def masked_accuracy(label, pred):
    """Fraction of real (non-padding) target tokens predicted exactly."""
    label = tf.cast(label, tf.int64)
    match = tf.cast(tf.argmax(pred, axis=-1) == label, tf.float32)
    mask = tf.cast(label != PAD_ID, tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(match * mask), tf.reduce_sum(mask))


@keras.saving.register_keras_serializable(package="keras_transformer")
class TargetTokens(keras.metrics.Metric):
    """Counts the real (non-padding) target tokens seen: the numerator of tokens/s."""

    def __init__(self, name="target_tokens", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total.assign_add(tf.cast(tf.math.count_nonzero(y_true), tf.float32))

    def result(self):
        # A copy: the logs must not follow the variable once it is reset.
        return tf.identity(self.total)

    def reset_state(self):
        self.total.assign(0.0)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.Metric):
    """`masked_accuracy` over all real target tokens seen, as a stateful metric.

    Wrapping the function averages per-batch values: short batches weigh as
    much as full ones, and the empty batches tf.distribute may feed at the end
    of an unknown-length dataset count as zero accuracy. This counts tokens.
    """

    def __init__(self, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.correct = self.add_variable(
            shape=(), initializer="zeros", dtype="float32", name="correct"
        )
        self.total = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        label = tf.cast(y_true, tf.int64)
        mask = tf.cast(label != PAD_ID, tf.float32)
        match = tf.cast(tf.argmax(y_pred, axis=-1) == label, tf.float32)
        self.correct.assign_add(tf.reduce_sum(match * mask))
        self.total.assign_add(tf.reduce_sum(mask))

    def result(self):
        return tf.math.divide_no_nan(self.correct, self.total)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)


# ----------------------------------------------------------------------------- configuration


@dataclasses.dataclass
class TrainConfig:
    """Every setting of a training run; stored in the run directory's config.json.

    The defaults are the TensorFlow tutorial's (TED pt->en: 4 layers,
    d_model 128, dff 512, 8 heads, dropout 0.1, 128 tokens, ~8k vocabularies).
    """

    # Data. corpus: "demo" (built in), "files" (src/tgt), "tsv" or "tfds".
    corpus: str = "demo"
    src: str | None = None
    tgt: str | None = None
    val_src: str | None = None
    val_tgt: str | None = None
    tsv: str | None = None
    val_tsv: str | None = None
    tfds_name: str = "ted_hrlr_translate/pt_to_en"
    demo_pairs: int = 20000
    demo_languages: str = "en-pt"
    val_fraction: float = 0.05  # held out when no validation set is given
    max_tokens: int = 128
    overlong: str = "truncate"
    batch_size: int = 64
    batch_tokens: int | None = None
    shuffle_buffer: int = 20000
    # Tokenizers (one WordPiece vocabulary per language, learned from the training text).
    vocab_size: int = 8000
    vocab_lower_thresh: int = 5
    lower_case: bool = True
    normalization_form: str | None = "NFC"
    # Model.
    num_layers: int = 4
    d_model: int = 128
    num_heads: int = 8
    dff: int = 512
    dropout_rate: float = 0.1
    max_length: int = 2048
    normalize_first: bool = False
    tie_embeddings: bool = False  # output projection = target embedding (paper 3.4)
    # Optimisation.
    epochs: int = 20
    steps_per_epoch: int | None = None
    warmup_steps: int = 4000
    label_smoothing: float = 0.0
    early_stopping_patience: int | None = None
    time_budget_minutes: float | None = None  # stop after the epoch that passes it
    jit_compile: str = "auto"  # "auto", "true" or "false"
    # Dropout masks from an integer hash (HashedDropout): much cheaper under XLA on CPU.
    hashed_dropout: bool = False
    # Long queries attend in chunks on TensorFlow's CPU kernels (layers/query_chunks.py):
    # faster from 33 tokens at head size 16, slower first trace.
    chunk_queries: bool = False
    mixed_precision: str = "none"  # "none", "float16" or "bfloat16"
    strategy: str = "default"  # "default", "mirrored", "multi_worker" or "tpu" (distribute.py)
    seed: int = 0

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"Unknown training settings: {unknown}. Known: {sorted(names)}")
        return cls(**values)

    @classmethod
    def from_file(cls, path: str | os.PathLike, **overrides) -> TrainConfig:
        """Settings from a JSON file, then `overrides`."""
        return cls.from_dict({**read_config_file(path), **overrides})

    def validate(self) -> None:
        choices = {
            "corpus": ("demo", "files", "tsv", "tfds"),
            "overlong": ("truncate", "drop"),
            "jit_compile": ("auto", "true", "false"),
            "mixed_precision": ("none", "float16", "bfloat16"),
            "strategy": distribute.STRATEGIES,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"{name} must be one of {allowed}. Received: {getattr(self, name)!r}"
                )
        if self.corpus == "files" and not (self.src and self.tgt):
            raise ValueError("corpus='files' needs both src and tgt (--src FILE --tgt FILE).")
        if self.corpus == "tsv" and not self.tsv:
            raise ValueError("corpus='tsv' needs tsv (--tsv FILE).")
        if bool(self.val_src) != bool(self.val_tgt):
            raise ValueError("Give both val_src and val_tgt, or neither.")
        for name in ("epochs", "batch_size", "max_tokens", "vocab_size", "warmup_steps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive. Received: {name}={getattr(self, name)}")

    def model_kwargs(self, input_vocab_size: int, target_vocab_size: int) -> dict:
        """Constructor arguments of the Transformer (config.json's "model")."""
        return {
            "num_layers": self.num_layers,
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "dff": self.dff,
            "input_vocab_size": input_vocab_size,
            "target_vocab_size": target_vocab_size,
            "dropout_rate": self.dropout_rate,
            "max_length": self.max_length,
            "normalize_first": self.normalize_first,
            "tie_embeddings": self.tie_embeddings,
        }

    def tokenizer_kwargs(self) -> dict:
        return {"lower_case": self.lower_case, "normalization_form": self.normalization_form}


def read_config_file(path: str | os.PathLike) -> dict:
    """Settings from a JSON file: flat TrainConfig fields, or a run directory's config.json."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"Config file {path} is not valid JSON: {error}") from None
    if not isinstance(values, dict):
        raise ValueError(f"Config file {path} must hold a JSON object of settings.")
    if isinstance(values.get("training"), dict):
        values = values["training"]
    return values


# The built-in demo: a model small enough to learn numbers-as-words in minutes on a CPU.
DEMO_SETTINGS = {
    "corpus": "demo",
    "demo_pairs": 20000,
    "num_layers": 2,
    "d_model": 128,
    "num_heads": 4,
    "dff": 256,
    "dropout_rate": 0.1,
    "max_tokens": 48,
    "batch_size": 64,
    "warmup_steps": 500,
    "epochs": 4,
    "vocab_size": 2000,
}


# ----------------------------------------------------------------------------- callbacks


def _write_json_atomically(path: Path, value) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_history(run_dir: str | os.PathLike) -> list[dict]:
    """history.json: one dict per completed epoch ("epoch" counts from 1)."""
    path = Path(run_dir) / run_dir_lib.HISTORY_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []


class RunHistory(keras.callbacks.Callback):
    """Keeps history.json (and the curves PNG) up to date after every epoch.

    Survives a resume: the file holds every completed epoch of the run, and
    an epoch that is trained again replaces its earlier entry. Also records
    the epoch's wall time, its training time and target tokens per second.
    """

    def __init__(self, run_dir: str | os.PathLike, plot: bool = True):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.plot = plot
        self.entries: list[dict] = []

    def on_train_begin(self, logs=None):
        self.entries = read_history(self.run_dir)

    def on_epoch_begin(self, epoch, logs=None):
        self.entries = [e for e in self.entries if e["epoch"] <= epoch]
        self._start = time.perf_counter()
        self._train_end = None

    def on_test_begin(self, logs=None):
        if getattr(self, "_start", None) is not None and self._train_end is None:
            self._train_end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        end = time.perf_counter()
        train_seconds = (self._train_end or end) - self._start
        entry = {"epoch": epoch + 1, **{k: float(v) for k, v in (logs or {}).items()}}
        entry["epoch_seconds"] = end - self._start
        entry["train_seconds"] = train_seconds
        entry["optimizer_steps"] = int(self.model.optimizer.iterations.numpy())
        if "target_tokens" in entry:
            entry["target_tokens_per_second"] = entry["target_tokens"] / train_seconds
        self.entries.append(entry)
        _write_json_atomically(self.run_dir / run_dir_lib.HISTORY_FILE, self.entries)
        if self.plot:
            from keras_transformer.plotting import plot_training_curves

            plot_training_curves(self.entries, self.run_dir / run_dir_lib.CURVES_FILE)
        self._start = None


class TimeBudget(keras.callbacks.Callback):
    """Ends training after the first epoch that finishes past `minutes` of this process.

    Checked at epoch ends only, so every epoch is complete and checkpointed;
    a resumed run gets a fresh budget.
    """

    def __init__(self, minutes: float):
        super().__init__()
        if minutes <= 0:
            raise ValueError(f"time_budget_minutes must be positive. Received: {minutes}")
        self.seconds = minutes * 60.0
        self._start = time.monotonic()

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        if time.monotonic() - self._start >= self.seconds:
            print(
                f"\nTime budget of {self.seconds / 60:g} minutes reached after epoch {epoch + 1}."
            )
            self.model.stop_training = True


def make_callbacks(config: TrainConfig, run_dir: Path, best_val_loss: float | None) -> list:
    """History, backups (resume after a kill), best/last checkpoints, TensorBoard, NaN stop."""
    callbacks = [
        # First, so that an epoch is in history.json before its backup claims it done.
        RunHistory(run_dir),
        keras.callbacks.ModelCheckpoint(
            run_dir / run_dir_lib.BEST_CHECKPOINT,
            monitor="val_loss",
            save_best_only=True,
            # After a resume, only an epoch better than the run's best so far replaces it.
            initial_value_threshold=best_val_loss,
        ),
        keras.callbacks.ModelCheckpoint(run_dir / run_dir_lib.LAST_CHECKPOINT),
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.TensorBoard(
            run_dir / run_dir_lib.LOG_DIR, update_freq="epoch", write_graph=False
        ),
        # Kept after the run (delete_checkpoint=False): training again with more
        # epochs continues where it stopped. Two copies survive a kill mid-write.
        keras.callbacks.BackupAndRestore(
            run_dir / run_dir_lib.BACKUP_DIR, double_checkpoint=True, delete_checkpoint=False
        ),
    ]
    if config.time_budget_minutes:
        callbacks.append(TimeBudget(config.time_budget_minutes))
    if config.early_stopping_patience:
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor="val_loss", patience=config.early_stopping_patience, verbose=1
            )
        )
    return callbacks


# ----------------------------------------------------------------------------- train


def load_corpus(config: TrainConfig) -> tuple[object, object]:
    """(train, validation) pairs (lists, or string datasets for tfds)."""
    from keras_transformer import data

    if config.corpus == "tfds":
        return (
            data.load_tfds(config.tfds_name, "train"),
            data.load_tfds(config.tfds_name, "validation"),
        )
    if config.corpus == "demo":
        source_lang, target_lang = config.demo_languages.split("-")
        pairs = data.demo_corpus(config.demo_pairs, config.seed, source_lang, target_lang)
    elif config.corpus == "files":
        pairs = data.read_parallel_files(config.src, config.tgt)
    else:
        pairs = data.read_tsv(config.tsv)
    if config.val_src:
        return pairs, data.read_parallel_files(config.val_src, config.val_tgt)
    if config.val_tsv:
        return pairs, data.read_tsv(config.val_tsv)
    return data.split_pairs(pairs, config.val_fraction, config.seed)


def _texts(pairs, side: int) -> list[str] | tf.data.Dataset:
    if isinstance(pairs, tf.data.Dataset):
        return pairs.map(lambda *pair: pair[side])
    return [pair[side] for pair in pairs]


def build_tokenizers(config: TrainConfig, train_pairs, run_dir: Path):
    """The run's tokenizers: vocabularies learned from the training text, or reused from run_dir."""
    tokenizers = []
    for side, filename in enumerate((run_dir_lib.SOURCE_VOCAB_FILE, run_dir_lib.TARGET_VOCAB_FILE)):
        path = run_dir / filename
        if not path.is_file():
            vocab = learn_vocabulary(
                _texts(train_pairs, side),
                vocab_size=config.vocab_size,
                lower_thresh=config.vocab_lower_thresh,
                **config.tokenizer_kwargs(),
            )
            write_vocabulary(vocab, path)
        tokenizers.append(Tokenizer(path, **config.tokenizer_kwargs()))
    return tuple(tokenizers)


def _strategy(name: str) -> tf.distribute.Strategy:
    return distribute.get_strategy(name)


def _check_same_run(run_dir: Path, run_config: dict) -> None:
    path = run_dir / run_dir_lib.CONFIG_FILE
    if not path.is_file():
        return
    old = run_dir_lib.read_config(run_dir)
    for section in ("model", "tokenizer", "data"):
        if old.get(section) != run_config[section]:
            raise ValueError(
                f"{run_dir} holds a run with different {section} settings "
                f"({old.get(section)} != {run_config[section]}); use another run directory "
                "to start a new run."
            )


def train(
    config: dict | TrainConfig, run_dir: str | os.PathLike, verbose: str | int = "auto"
) -> keras.callbacks.History:
    """Trains a Transformer as `config` says and fills `run_dir` (see run_dir.py).

    Started again on the same run directory, it resumes from the last
    completed epoch (BackupAndRestore) and reuses the vocabularies. The
    returned History holds every epoch of the run, earlier processes included.
    """
    from keras_transformer import data

    if isinstance(config, dict):
        config = TrainConfig.from_dict(config)
    config.validate()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(config.seed)

    train_pairs, val_pairs = load_corpus(config)
    source_tokenizer, target_tokenizer = build_tokenizers(config, train_pairs, run_dir)
    model_kwargs = config.model_kwargs(source_tokenizer.vocab_size, target_tokenizer.vocab_size)
    data_settings = {
        k: getattr(config, k)
        for k in ("corpus", "src", "tgt", "tsv", "tfds_name", "demo_pairs", "demo_languages")
    }
    run_config = {
        "model": model_kwargs,
        "tokenizer": config.tokenizer_kwargs(),
        "data": data_settings,
        "training": dataclasses.asdict(config),
    }
    _check_same_run(run_dir, run_config)
    run_dir_lib.write_config(run_dir, run_config)

    batch_args = dict(
        batch_size=config.batch_size,
        max_tokens=config.max_tokens,
        batch_tokens=config.batch_tokens,
        overlong=config.overlong,
    )
    train_batches = data.make_batches(
        train_pairs,
        source_tokenizer,
        target_tokenizer,
        shuffle=True,
        shuffle_buffer=config.shuffle_buffer,
        seed=config.seed,
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

    dtype = {"none": None, "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}
    jit_compile = {"auto": "auto", "true": True, "false": False}[config.jit_compile]
    with _strategy(config.strategy).scope():
        # hashed_dropout and chunk_queries change how the step computes, not the
        # model: they stay out of config.json's "model", so a run may resume with
        # them switched.
        model = Transformer(
            **model_kwargs,
            hashed_dropout=config.hashed_dropout,
            chunk_queries=config.chunk_queries,
            dtype=dtype[config.mixed_precision],
        )
        model.compile(
            optimizer=make_optimizer(config.d_model, config.warmup_steps),
            loss=MaskedLoss(config.label_smoothing),
            metrics=[MaskedAccuracy(), TargetTokens()],
            jit_compile=jit_compile,
        )
        # BackupAndRestore needs a built model to restore into.
        ones = tf.ones((1, 4), tf.int64)
        model((ones, ones), training=False)

    past = read_history(run_dir)
    best = min((e["val_loss"] for e in past if "val_loss" in e), default=None)
    history = model.fit(
        train_batches,
        validation_data=val_batches,
        epochs=config.epochs,
        steps_per_epoch=config.steps_per_epoch,
        callbacks=make_callbacks(config, run_dir, best),
        verbose=verbose,
        shuffle=False,  # make_batches shuffles
    )
    # The whole run's history, not only this process's epochs.
    entries = read_history(run_dir)
    history.epoch = [e["epoch"] - 1 for e in entries]
    history.history = (
        {key: [e.get(key) for e in entries] for key in entries[-1] if key != "epoch"}
        if entries
        else {}
    )
    return history


# ----------------------------------------------------------------------------- translation
