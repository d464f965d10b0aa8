"""MarianMT (OPUS-MT) checkpoints imported into the library's Transformer and tokenizers.

`load_marian(DIR)` reads a checkpoint as transformers' `save_pretrained` writes it
(marian_config.py reads and checks its settings and vocabularies) and returns the
library's own `Transformer`, built with the options Marian needs (post-LN blocks,
its activation, sinusoidal positions in halves, its embedding scale, the tied
projection's logits bias, uneven depths, a source without [START]), and the two
`MarianTokenizer`s. `import_marian(DIR, RUN)` writes them as an ordinary run
directory, which `export`, `translate`, `evaluate`, `score` and `train --init-from`
take as they take a trained run.

The weights are assigned layer by layer below, each transpose beside its
assignment: torch's `Linear.weight` is `(out, in)`, Keras' `Dense.kernel` is
`(in, out)`. Embedding rows, output-projection columns and the logits bias are
taken in the library's id order (`Vocabulary.order`), so that the logits of every
Marian id are Marian's, under the library's id; [PAD] and [START] get
`SUPPRESSED_LOGIT_BIAS`, as transformers' generation never emits pad.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from keras_transformer.constants import PAD_ID, START_ID
from keras_transformer.layers.embedding import positional_encoding
from keras_transformer.models.transformer import Transformer
from keras_transformer.pretrained.imported_run import (
    PretrainedModel,
    checkpoint_generation,
    import_run,
)
from keras_transformer.pretrained.marian_config import (
    SOURCE_SPM,
    SUPPRESSED_LOGIT_BIAS,
    TARGET_SPM,
    MarianSpec,
    read_spec,
)
from keras_transformer.pretrained.safetensors_io import (
    SAFETENSORS_FILE,
    CheckpointError,
    open_weights,
)
from keras_transformer.pretrained.weight_map import (
    CheckpointTensors,
    Rows,
    assign,
    block_weights,
    build_for_import,
)
from keras_transformer.text.tokenizers.marian import MarianTokenizer

# The import's result (kept under its first name).
MarianModel = PretrainedModel


def load_marian(directory: str | os.PathLike) -> MarianModel:
    """A MarianMT checkpoint directory as the library's Transformer and tokenizers.

    Args:
        directory: what `save_pretrained` writes for a `MarianMTModel` and its
            `MarianTokenizer` (or `huggingface-cli download
            Helsinki-NLP/opus-mt-en-de --local-dir DIR` fetches).

    Returns:
        a `PretrainedModel`: `.model`, `.source_tokenizer`, `.target_tokenizer`,
        `.config`, `.generation` (the checkpoint's decoding settings).

    Raises:
        CheckpointError (a ValueError): a file missing or damaged, weights
            whose shapes do not match config.json, or a setting the library
            does not compute; one line naming the file or the setting.
    """
    spec = read_spec(directory)
    source_tokenizer, target_tokenizer = _tokenizers(spec)
    # Positions are computed (checked in `_check_positions`); tied copies are the same.
    ignored = ("embed_positions", "embed_tokens", "model.shared")
    model = Transformer(**spec.model_kwargs)
    build_for_import(model)
    with open_weights(spec.directory) as weights:
        tensors = CheckpointTensors(
            weights,
            spec.directory / SAFETENSORS_FILE,
            ignored + (("lm_head",) if spec.tied_output else ()),
        )
        _assign(model, tensors, spec)
        tensors.check_all_used()
    return PretrainedModel(
        model,
        source_tokenizer,
        target_tokenizer,
        dict(spec.model_kwargs),
        family="marian",
        tokenizer_kind="marian",
        max_tokens=spec.max_tokens,
        generation=checkpoint_generation(spec.directory),
    )


def import_marian(directory: str | os.PathLike, run_dir: str | os.PathLike) -> Path:
    """Writes a MarianMT checkpoint as a run directory and returns its path.

    The run directory holds what a training run leaves for `export`,
    `translate`, `evaluate`, `score` and `train --init-from`: config.json
    (the model's settings, the tokenizer kind "marian", a "pretrained"
    section naming the checkpoint), marian_source.json and marian_target.json
    (the tokenizers) and checkpoints/best.keras. It is written in a temporary
    directory beside `run_dir` and renamed into place whole: a failure leaves
    nothing behind.

    Args:
        directory: the checkpoint directory (see `load_marian`).
        run_dir: the run directory to create; it must not exist, or be empty.

    Raises:
        CheckpointError: as `load_marian`, or `run_dir` holds files already.
    """
    return import_run(load_marian, directory, run_dir)


def _tokenizers(spec: MarianSpec) -> tuple[MarianTokenizer, MarianTokenizer]:
    def tokenizer(filename, vocabulary, name):
        path = spec.directory / filename
        try:
            proto = path.read_bytes()
            return MarianTokenizer((proto, vocabulary.library_pieces()), name=name)
        except (OSError, ValueError) as error:
            raise CheckpointError(
                f"{path} cannot be read as a SentencePiece model: {error}"
            ) from None

    return (
        tokenizer(SOURCE_SPM, spec.source, "source_tokenizer"),
        tokenizer(TARGET_SPM, spec.target, "target_tokenizer"),
    )


def _assign(model: Transformer, tensors: CheckpointTensors, spec: MarianSpec) -> None:
    """Every weight of `model` from the checkpoint (`weight_map.assign`)."""
    assign(model, tensors, _weight_map(spec), "Marian")
    for stack in ("encoder", "decoder"):
        _check_positions(tensors, stack, model.max_length, spec.model_kwargs["d_model"])


def _weight_map(spec: MarianSpec) -> dict[str, tuple[list[str], tuple, object]]:
    """The model's variable paths -> (checkpoint names, the first saved is read; its
    shape there; the function that turns it into the variable's value)."""
    kwargs = spec.model_kwargs
    d = kwargs["d_model"]
    vocab_src, vocab_tgt = len(spec.source.pieces), len(spec.target.pieces)
    source_order, target_order = spec.source.order, spec.target.order

    def logits_bias(value):  # (1, vocab) -> (vocab + 1,) in library order, [PAD] and [START] off
        value = value[0][target_order]
        value[[PAD_ID, START_ID]] = SUPPRESSED_LOGIT_BIAS
        return value

    # Tied weights are saved once, under one of their names.
    shared = ["model.shared.weight", "model.encoder.embed_tokens.weight"]
    weights = {
        "encoder/embedding/token_embedding/embeddings": (
            shared if spec.shared_embeddings else ["model.encoder.embed_tokens.weight"],
            (vocab_src, d),
            Rows(source_order),  # rows in library order, [START] repeated
        ),
        "decoder/embedding/token_embedding/embeddings": (
            ["model.decoder.embed_tokens.weight"],
            (vocab_tgt, d),
            Rows(target_order),
        ),
        "logits_bias": (["final_logits_bias"], (1, vocab_tgt), logits_bias),
        "final_layer/kernel": (
            ["lm_head.weight"],
            (vocab_tgt, d),
            lambda value: value[target_order].T,  # (vocab, d_model) -> columns by id
        ),
        "final_layer/bias": (["final_logits_bias"], (1, vocab_tgt), logits_bias),
    }
    return block_weights(weights, kwargs)


def _check_positions(tensors: CheckpointTensors, stack: str, length: int, d: int) -> None:
    """Saved sinusoidal positions (older checkpoints keep them) must be the ones the
    model computes: Marian's layout, sines then cosines."""
    name = f"model.{stack}.embed_positions.weight"
    if not tensors.has(name):
        return
    saved = tensors.get(name, (length, d))
    if not np.allclose(saved, positional_encoding(length, d, "halves"), atol=1e-4):
        raise CheckpointError(
            f"{SAFETENSORS_FILE}: {name} is not Marian's sinusoidal encoding (learned "
            "positions are not supported)."
        )
