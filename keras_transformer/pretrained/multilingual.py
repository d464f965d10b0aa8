"""What the multilingual families' importers share (M2M-100 / NLLB: `m2m_100.py`; mBART:
`mbart.py`): their config read, their vocabulary and tokenizer, the weights.

These are BART's descendants with pre-LN blocks and a final layer norm after each stack,
one vocabulary for both sides and a tied output projection; a family module says what
differs (positions, the embedding's layer norm, the logits bias) as a `Family`.

Ids: fairseq's `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3; the decoder starts from `</s>`
(`decoder_start_token_id`) with the target's language code forced next. The vocabulary
is reordered into the library's ids (`vocabulary.py`); [START] repeats the start row and
its logit is suppressed (`SUPPRESSED_LOGIT_BIAS`) so that log-probabilities are the
checkpoint's, whose vocabulary has one row fewer.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from keras_transformer.constants import START_ID
from keras_transformer.layers.embedding import positional_encoding
from keras_transformer.models.transformer import Transformer
from keras_transformer.pretrained.imported_run import PretrainedModel, checkpoint_generation
from keras_transformer.pretrained.marian_config import (
    ACTIVATIONS,
    CONFIG_FILE,
    LAYER_NORM_EPSILON,
    SUPPRESSED_LOGIT_BIAS,
    read_json,
)
from keras_transformer.pretrained.multilingual_files import read_tokenizer_files
from keras_transformer.pretrained.safetensors_io import CheckpointError, open_weights
from keras_transformer.pretrained.vocabulary import Vocabulary
from keras_transformer.pretrained.weight_map import (
    CheckpointTensors,
    Rows,
    assign,
    block_weights,
    build_for_import,
    norm,
    same,
)
from keras_transformer.text.tokenizers.multilingual import MultilingualTokenizer

# fairseq's position ids start after the padding id (1): the first token is at row 2.
POSITION_OFFSET = 2


@dataclasses.dataclass(frozen=True)
class Family:
    """What a family's checkpoints compute differently.

    name: config.json's model_type.
    position_layout: "fairseq" (sinusoidal, computed) or "learned" (saved).
    embedding_layer_norm: a layer norm after embeddings and positions (mBART's).
    logits_bias: the checkpoint holds `final_logits_bias` (mBART's).
    refused: config.json settings -> the value the library does not compute.
    """

    name: str
    position_layout: str
    embedding_layer_norm: bool
    logits_bias: bool
    refused: dict = dataclasses.field(default_factory=dict)


def load_multilingual(directory: str | os.PathLike, family: Family) -> PretrainedModel:
    """A checkpoint of `family` as the library's Transformer and tokenizer (see the
    family modules' `load`)."""
    directory = Path(directory)
    config = read_json(directory / CONFIG_FILE, "model settings")
    path = directory / CONFIG_FILE
    for name, value in family.refused.items():
        if name in config and config[name] == value:
            raise CheckpointError(f"{path}: {name}={config[name]!r} is not supported.")
    setting = _setting_reader(config, path)
    vocab_size = setting("vocab_size")
    files = read_tokenizer_files(directory, vocab_size)
    pad, eos = setting("pad_token_id", 0), setting("eos_token_id", 0)
    start = setting("decoder_start_token_id", 0)
    if start != eos:
        # mBART-cc25's translation checkpoints start from the language code.
        raise CheckpointError(
            f"{path}: decoder_start_token_id={start} is not eos_token_id={eos}; only decoders "
            "that start from </s>, with the target's code forced next, are supported."
        )
    unk = files.pieces.index("<unk>")
    vocabulary = Vocabulary.reordered(files.pieces, pad, unk, start, eos)
    model_kwargs = _model_kwargs(config, path, setting, family, len(vocabulary.order))
    tokenizer = MultilingualTokenizer(
        (
            files.sentencepiece_model,
            vocabulary.library_pieces(),
            {code: vocabulary.library_id(i) for code, i in files.languages.items()},
            [vocabulary.library_id(i) for i in files.special_ids],
        ),
        name="joint_tokenizer",
    )
    model = Transformer(**model_kwargs)
    build_for_import(model)
    # Tied copies of the shared table, and computed positions, are not read.
    ignored = ("embed_tokens", "lm_head")
    if family.position_layout != "learned":
        ignored += ("embed_positions",)
    with open_weights(directory) as weights:
        tensors = CheckpointTensors(weights, directory, ignored)
        assign(model, tensors, _weight_map(family, model_kwargs, vocabulary), family.name)
        if family.position_layout != "learned":
            _check_positions(tensors, model_kwargs)
        tensors.check_all_used()
    return PretrainedModel(
        model,
        tokenizer,
        tokenizer,
        model_kwargs,
        family=family.name,
        tokenizer_kind="multilingual",
        max_tokens=model_kwargs["max_length"],
        generation=checkpoint_generation(directory),
    )


def _setting_reader(config: dict, path: Path):
    def setting(name, least=1):
        value = config.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise CheckpointError(f"{path}: {name}={value!r} is missing or not a valid int.")
        return value

    return setting


def _model_kwargs(config, path, setting, family: Family, vocab_size: int) -> dict:
    heads = setting("encoder_attention_heads")
    dff = setting("encoder_ffn_dim")
    for name, value in (("decoder_attention_heads", heads), ("decoder_ffn_dim", dff)):
        if setting(name) != value:
            raise CheckpointError(
                f"{path}: {name}={config[name]} differs from the encoder's ({value}); only "
                "equal sizes are supported."
            )
    activation = config.get("activation_function")
    if activation not in ACTIVATIONS:
        raise CheckpointError(
            f"{path}: activation_function={activation!r} is not supported "
            f"(known: {sorted(ACTIVATIONS)})."
        )
    d_model = setting("d_model")
    if d_model % heads or d_model % 2:
        raise CheckpointError(
            f"{path}: d_model={d_model} must be even and divisible by the attention heads "
            f"({heads})."
        )
    if config.get("pad_token_id") != 1:
        raise CheckpointError(
            f"{path}: pad_token_id={config.get('pad_token_id')!r}; fairseq's models pad with 1."
        )
    encoder_layers, decoder_layers = setting("encoder_layers"), setting("decoder_layers")
    if config.get("tie_word_embeddings", True) is False:
        raise CheckpointError(f"{path}: tie_word_embeddings=false is not supported.")
    return dict(
        num_layers=encoder_layers,
        d_model=d_model,
        num_heads=heads,
        dff=dff,
        input_vocab_size=vocab_size,
        target_vocab_size=vocab_size,
        dropout_rate=float(config.get("dropout", 0.1)),
        attention_dropout=float(config.get("attention_dropout", 0.0)),
        activation=ACTIVATIONS[activation],
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        normalize_first=True,
        max_length=setting("max_position_embeddings"),
        tie_embeddings=True,
        share_embeddings=True,
        decoder_layers=None if decoder_layers == encoder_layers else decoder_layers,
        embedding_scale=None if config.get("scale_embedding", False) else 1.0,
        position_layout=family.position_layout,
        position_offset=POSITION_OFFSET,
        embedding_layer_norm=family.embedding_layer_norm,
        logits_bias=True,  # the checkpoint's, or zeros: [START] is suppressed there
        source_start=False,
    )


def _weight_map(family: Family, kwargs: dict, vocabulary: Vocabulary) -> dict:
    d, order = kwargs["d_model"], vocabulary.order
    size = len(vocabulary.pieces)

    def logits_bias(value):  # (1, vocab) -> (vocab + 1,) in library order, [START] off
        value = value[0][order]
        value[START_ID] = SUPPRESSED_LOGIT_BIAS
        return value

    shared = ["model.shared.weight", "model.encoder.embed_tokens.weight"]
    weights = {
        "encoder/embedding/token_embedding/embeddings": (
            shared,
            (size, d),
            Rows(order),  # rows in library order, [START] repeated
        ),
    }
    if family.logits_bias:
        weights["logits_bias"] = (["final_logits_bias"], (1, size), logits_bias)
    else:
        # The bias exists to suppress [START]: the checkpoint has none to read.
        weights["logits_bias"] = ([], (), lambda _: logits_bias(np.zeros((1, size), np.float32)))
    rows = kwargs["max_length"] + POSITION_OFFSET
    for stack in ("encoder", "decoder"):
        norm(weights, f"{stack}/final_layernorm", f"model.{stack}.layer_norm", d)
        if family.embedding_layer_norm:
            norm(weights, f"{stack}/embedding/layernorm", f"model.{stack}.layernorm_embedding", d)
        if family.position_layout == "learned":
            weights[f"{stack}/embedding/position_embeddings"] = (
                [f"model.{stack}.embed_positions.weight"],
                (rows, d),
                same,
            )
    return block_weights(weights, kwargs)


def _check_positions(tensors: CheckpointTensors, kwargs: dict) -> None:
    """Saved sinusoidal positions (some checkpoints keep them) must be the ones the model
    computes; fairseq zeroes the padding id's row, which no token reads."""
    d = kwargs["d_model"]
    rows = kwargs["max_length"] + POSITION_OFFSET
    expected = positional_encoding(rows, d, "fairseq")
    for stack in ("encoder", "decoder"):
        name = f"model.{stack}.embed_positions.weights"
        if tensors.has(name):
            saved = tensors.get(name, (rows, d))
            if not np.allclose(saved[POSITION_OFFSET:], expected[POSITION_OFFSET:], atol=1e-4):
                raise CheckpointError(
                    f"{name} is not fairseq's sinusoidal encoding (learned positions are not "
                    "supported for this model_type)."
                )
