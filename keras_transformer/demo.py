"""The built-in demo: a model small enough to learn numbers-as-words in minutes on a CPU.

`run_demo` is what `keras-transformer demo` does: train, export the best
checkpoint, reload the export and translate held-out pairs with it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

import tensorflow as tf

from keras_transformer.inference.export import DEFAULT_EXPORT_ROOT, check_export_name, export_run
from keras_transformer.inference.loaded_export import load_translator, translate_texts
from keras_transformer.text import corpora
from keras_transformer.training import train
from keras_transformer.training.config import TrainConfig

if TYPE_CHECKING:
    import keras

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
DEFAULT_RUN_DIR = "runs/demo"
DEFAULT_EXPORT_NAME = "demo"
DEFAULT_EXAMPLES = 5


def target_normalized(text: str, config: TrainConfig | None = None) -> str:
    """The reference in the form the run's tokenizer writes its output.

    SentencePiece (the default) gives back the text after its normalization:
    Unicode normal form, whitespace runs as one space, lowercased if asked.
    WordPiece lowercases (by default) and sets every punctuation mark apart.
    """
    config = config or TrainConfig.from_dict(DEMO_SETTINGS)
    if config.lower_case:
        text = text.lower()
    if config.tokenizer == "wordpiece":
        return " ".join(re.sub(r"([^\w\s])", r" \1 ", text).split())
    if config.normalization_form:
        text = unicodedata.normalize(config.normalization_form, text)
    return " ".join(text.split())


@dataclasses.dataclass(frozen=True)
class DemoTranslation:
    """One held-out pair and what the exported model made of its source."""

    source: str
    translation: str
    score: float  # log-probability of the translation
    reference: str
    correct: bool  # the translation is the reference, in the tokenizer's output form


@dataclasses.dataclass(frozen=True)
class DemoResult:
    history: keras.callbacks.History  # every epoch of the run, earlier processes' included
    run_dir: Path
    export_dir: Path  # EXPORT_ROOT/NAME/VERSION
    translations: list[DemoTranslation]


def _first_pairs(pairs, count: int) -> list[tuple[str, str]]:
    if isinstance(pairs, tf.data.Dataset):
        return [
            (source.decode("utf-8"), target.decode("utf-8"))
            for source, target in pairs.take(count).as_numpy_iterator()
        ]
    return list(pairs[:count])


def run_demo(
    config: dict | TrainConfig | None = None,
    run_dir: str | os.PathLike = DEFAULT_RUN_DIR,
    export_root: str | os.PathLike = DEFAULT_EXPORT_ROOT,
    name: str = DEFAULT_EXPORT_NAME,
    examples: int = DEFAULT_EXAMPLES,
    verbose: str | int = "auto",
) -> DemoResult:
    """Trains `config` into `run_dir`, exports it and translates held-out pairs with the export.

    Args:
        config: the run's settings; `DEMO_SETTINGS` by default.
        export_root, name: the export goes to `export_root/name/<next free version>/`.
        examples: how many validation pairs to translate (greedy search), first ones first.
        verbose: `model.fit` verbosity.
    """
    if examples < 0:
        raise ValueError(f"examples must be 0 or more. Received: examples={examples}")
    check_export_name(name)  # before training, not after
    if config is None:
        config = DEMO_SETTINGS
    if isinstance(config, dict):
        config = TrainConfig.from_dict(config)
    history = train(config, run_dir, verbose=verbose)
    export_dir = export_run(run_dir, export_root, name=name)
    _, val_pairs = corpora.load_corpus(config)
    held_out = _first_pairs(val_pairs, examples)
    results = translate_texts(load_translator(export_dir), corpora.texts(held_out, 0))
    translations = [
        DemoTranslation(
            source,
            translation,
            score,
            reference,
            translation == target_normalized(reference, config),
        )
        for (source, reference), (translation, score) in zip(held_out, results, strict=True)
    ]
    return DemoResult(history, Path(run_dir), export_dir, translations)
