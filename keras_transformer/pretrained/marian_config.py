"""A Marian checkpoint's files read and checked: its config mapped onto the Transformer's
arguments, its vocabularies onto the library's ids.

What `save_pretrained` writes for a `MarianMTModel` and its `MarianTokenizer` (and
`huggingface-cli download Helsinki-NLP/opus-mt-...` fetches): config.json,
model.safetensors, source.spm, target.spm, vocab.json (target_vocab.json where the
vocabularies are separate), tokenizer_config.json, generation_config.json. Every
check here runs before a weight is read or a file written, and each failure is one
line naming the file or the setting (`CheckpointError`).

Ids. Marian's `</s>` is 0, `<unk>` 1 and `<pad>` the last id, and its decoder starts
from `decoder_start_token_id` (= pad): each side's vocabulary is reordered into the
library's ids (`vocabulary.py`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from keras_transformer.pretrained.safetensors_io import CheckpointError
from keras_transformer.pretrained.vocabulary import Vocabulary

CONFIG_FILE = "config.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SOURCE_SPM, TARGET_SPM = "source.spm", "target.spm"
VOCAB_FILE, TARGET_VOCAB_FILE = "vocab.json", "target_vocab.json"
# transformers' activation names Marian checkpoints use -> Keras' (transformers'
# "gelu" is the exact, erf form, as Keras' "gelu" by default).
ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu"}
# Settings of related configs (BART, mBART, Pegasus) that change the computation in
# ways the library's Transformer does not: refused when set so.
UNSUPPORTED = {
    "normalize_before": True,
    "add_final_layer_norm": True,
    "normalize_embedding": True,
    "layernorm_embedding": True,
    "add_bias_logits": True,
    "static_position_embeddings": False,
}
# transformers' torch layer norms: epsilon 1e-5.
LAYER_NORM_EPSILON = 1e-5
# The logits bias of [PAD] and [START], ids no search may emit (transformers' generate
# sets pad's logit to -inf: `bad_words_ids`): their probability is 0 in float32 next
# to any other logit, while a loss with label smoothing stays finite in fine-tuning,
# and the value is within float16's range.
SUPPRESSED_LOGIT_BIAS = -1e4


@dataclasses.dataclass(frozen=True)
class MarianSpec:
    """A checked Marian checkpoint: the Transformer's arguments and both vocabularies."""

    directory: Path
    model_kwargs: dict
    source: Vocabulary
    target: Vocabulary
    shared_embeddings: bool
    tied_output: bool
    max_tokens: int  # the tokenizer's model_max_length, within the model's positions


def read_json(path: Path, what: str):
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: it holds the checkpoint's {what}.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from None


def read_spec(directory) -> MarianSpec:
    """Reads and checks config.json, the vocabularies and the tokenizer files' presence."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory (a Marian checkpoint's).")
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise CheckpointError(
            f"{directory} is not a Marian checkpoint: {CONFIG_FILE} is missing "
            "(save_pretrained or huggingface-cli download writes it)."
        )
    config = read_json(config_path, "model settings")
    if not isinstance(config, dict) or config.get("model_type") != "marian":
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise CheckpointError(
            f"{config_path}: model_type is {kind!r}, not 'marian': not a MarianMT checkpoint."
        )
    for name in (SOURCE_SPM, TARGET_SPM):
        if not (directory / name).is_file():
            raise CheckpointError(
                f"{directory / name} is missing: it holds the checkpoint's "
                f"{name.split('.')[0]} SentencePiece model."
            )
    _check_supported(config, config_path)
    setting = _setting_reader(config, config_path)
    d_model = setting("d_model", int)
    heads = _same(setting, "encoder_attention_heads", "decoder_attention_heads")
    dff = _same(setting, "encoder_ffn_dim", "decoder_ffn_dim")
    encoder_layers, decoder_layers = setting("encoder_layers", int), setting("decoder_layers", int)
    activation = setting("activation_function", str)
    if activation not in ACTIVATIONS:
        raise CheckpointError(
            f"{config_path}: activation_function={activation!r} is not supported "
            f"(known: {sorted(ACTIVATIONS)})."
        )
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    tied = bool(config.get("tie_word_embeddings", True))
    if not shared and tied:
        # transformers ties such a model's output projection to the source embedding,
        # whatever the target vocabulary: not a computation to reproduce.
        raise CheckpointError(
            f"{config_path}: tie_word_embeddings=true with share_encoder_decoder_embeddings="
            "false is not supported."
        )
    separate_vocabs = bool(_tokenizer_config(directory).get("separate_vocabs", False))
    if shared and separate_vocabs:
        raise CheckpointError(
            f"{directory / TOKENIZER_CONFIG_FILE}: separate_vocabs=true, but {CONFIG_FILE} "
            "shares one embedding (share_encoder_decoder_embeddings=true)."
        )
    if shared:
        # One table: the source reads the target's order (the encoder never reads [START]).
        source = target = _vocabulary(directory / VOCAB_FILE, config, "vocab_size", "target")
    else:
        source = _vocabulary(directory / VOCAB_FILE, config, "vocab_size", "source")
        target_file = TARGET_VOCAB_FILE if separate_vocabs else VOCAB_FILE
        target = _vocabulary(directory / target_file, config, "decoder_vocab_size", "target")
    positions = setting("max_position_embeddings", int)
    model_max_length = _tokenizer_config(directory).get("model_max_length", positions)
    if not isinstance(model_max_length, int) or model_max_length <= 0:
        model_max_length = positions
    scale = config.get("scale_embedding", False)
    model_kwargs = dict(
        num_layers=encoder_layers,
        d_model=d_model,
        num_heads=heads,
        dff=dff,
        input_vocab_size=len(source.order),
        target_vocab_size=len(target.order),
        dropout_rate=float(config.get("dropout", 0.1)),
        attention_dropout=float(config.get("attention_dropout", 0.0)),
        activation=ACTIVATIONS[activation],
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        normalize_first=False,
        max_length=positions,
        tie_embeddings=tied,
        share_embeddings=shared,
        decoder_layers=None if decoder_layers == encoder_layers else decoder_layers,
        embedding_scale=None if scale else 1.0,
        position_layout="halves",
        logits_bias=tied,
        source_start=False,
    )
    if d_model % heads or d_model % 2:
        raise CheckpointError(
            f"{config_path}: d_model={d_model} must be even and divisible by the "
            f"attention heads ({heads})."
        )
    return MarianSpec(
        directory,
        model_kwargs,
        source,
        target,
        shared,
        tied,
        max_tokens=min(model_max_length, positions),
    )


def _check_supported(config: dict, path: Path) -> None:
    for name, refused in UNSUPPORTED.items():
        if name in config and bool(config[name]) == refused:
            raise CheckpointError(
                f"{path}: {name}={json.dumps(config[name])} is not supported (Marian's "
                "post-LN blocks with sinusoidal positions only)."
            )
    if not isinstance(config.get("scale_embedding", False), bool):
        raise CheckpointError(
            f"{path}: scale_embedding={config['scale_embedding']!r} is not supported "
            "(true: sqrt(d_model); false: 1)."
        )


def _setting_reader(config: dict, path: Path):
    def setting(name, kind):
        value = config.get(name)
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value <= 0):
            raise CheckpointError(
                f"{path}: {name}={value!r} is missing or not a valid {kind.__name__}."
            )
        return value

    return setting


def _same(setting, encoder_name: str, decoder_name: str) -> int:
    """One value for encoder and decoder: the library's Transformer has one of each size."""
    encoder, decoder = setting(encoder_name, int), setting(decoder_name, int)
    if encoder != decoder:
        raise CheckpointError(
            f"{CONFIG_FILE}: {encoder_name}={encoder} and {decoder_name}={decoder} differ; "
            "only equal sizes are supported."
        )
    return encoder


def _tokenizer_config(directory: Path) -> dict:
    path = directory / TOKENIZER_CONFIG_FILE
    if not path.is_file():
        return {}  # optional: the defaults of MarianTokenizer
    value = read_json(path, "tokenizer settings")
    return value if isinstance(value, dict) else {}


def _vocabulary(path: Path, config: dict, size_name: str, side: str) -> Vocabulary:
    """A vocab.json (piece -> Marian id) checked against config.json, and its library order."""
    vocab = read_json(path, f"{side} vocabulary")
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise CheckpointError(f"{path} must map pieces to integer ids.")
    size = len(vocab)
    if sorted(vocab.values()) != list(range(size)):
        raise CheckpointError(f"{path}: its ids must be 0 to {size - 1}, each once.")
    expected = config.get(size_name) or config.get("vocab_size")
    if expected != size:
        raise CheckpointError(
            f"{path} holds {size} pieces, but config.json's {size_name} is {expected}."
        )
    pieces = [""] * size
    for piece, i in vocab.items():
        pieces[i] = piece
    for token in ("</s>", "<unk>", "<pad>"):
        if token not in vocab:
            raise CheckpointError(f"{path} lacks the special token {token}.")
    eos, unk, pad = vocab["</s>"], vocab["<unk>"], vocab["<pad>"]
    start = pad
    if side == "target":
        for name, value in (("pad_token_id", pad), ("eos_token_id", eos)):
            if config.get(name, value) != value:
                raise CheckpointError(
                    f"{CONFIG_FILE}: {name}={config.get(name)}, but {path.name} puts "
                    f"{pieces[value]} at {value}."
                )
        start = config.get("decoder_start_token_id", pad)
        if not isinstance(start, int) or not 0 <= start < size:
            raise CheckpointError(
                f"{CONFIG_FILE}: decoder_start_token_id={start!r} is not an id of {path.name}."
            )
    return Vocabulary.reordered(pieces, pad, unk, start, eos)
