"""A run's tokenizer files: learned from training text, or copied from where they were made.

The ids a model learns mean what its tokenizer files say, so a file is written once,
whole (under a temporary name, renamed into place), and never learned again where it
is. `train` learns them from its training text or copies them (from prepared data, or
from the run it starts from); `prepare` learns them from a sample of the corpus.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from keras_transformer import atomic
from keras_transformer.training import run_dir as run_dir_lib
from keras_transformer.training.config import TrainConfig

try:  # learning from text needs TensorFlow; copying files does not
    import tensorflow as tf

    from keras_transformer.text import corpora
    from keras_transformer.text.tokenizers import (
        learn_sentencepiece_model,
        learn_vocabulary,
        write_sentencepiece_model,
        write_vocabulary,
    )
except ImportError as missing:
    if missing.name not in ("tensorflow", "tensorflow_text"):
        raise
    tf = corpora = None  # text sources are refused without them (data_sources.py)


def sides_of_files(settings: dict) -> dict[str, tuple[int, ...]]:
    """Tokenizer file -> the sides (0: source, 1: target) whose sentences it is learned
    from: one file a side, or one joint file from both (`shared_vocab`)."""
    source_file, target_file = run_dir_lib.tokenizer_files(settings)
    if source_file == target_file:
        return {source_file: (0, 1)}
    return {source_file: (0,), target_file: (1,)}


def build_tokenizers(config: TrainConfig, train_pairs, run_dir: Path):
    """The run's (source, target) tokenizers, learned from the training text once.

    Each model or vocabulary file is learned when run_dir lacks it and reused
    when it is there (a resumed run), so every epoch of a run sees the same
    ids. Files are written under a temporary name and renamed into place: a
    kill mid-write leaves no half file behind. With `shared_vocab` one model
    is learned from both sides and the same tokenizer is returned twice.
    """
    settings = run_dir_lib.tokenizer_settings({"tokenizer": config.tokenizer_kwargs()})
    for filename, sides in sides_of_files(settings).items():
        path = run_dir / filename
        if not path.is_file():
            learn_tokenizer_file(config, _training_texts(train_pairs, sides), path)
    return run_dir_lib.make_tokenizers(run_dir, settings)


def _training_texts(train_pairs, sides: tuple[int, ...]):
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


def copy_tokenizer_files(directory: Path, run_dir: Path, settings: dict) -> None:
    """Copies from `directory` the tokenizer files of `settings` that `run_dir` lacks.

    Whether `directory`'s files are the right ones (a prepared directory's, a run's
    own) is for the caller to check; the files `run_dir` has are kept.
    """
    for name in sorted(sides_of_files(settings)):
        if not (run_dir / name).is_file():
            source = directory / name
            atomic.write_atomically(
                run_dir / name, lambda partial, source=source: shutil.copyfile(source, partial)
            )
