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

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from keras_transformer.constants import PAD_ID, START_ID
from keras_transformer.layers.embedding import positional_encoding
from keras_transformer.models.transformer import Transformer
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
    read_weights,
)
from keras_transformer.text.tokenizers.marian import MarianTokenizer
from keras_transformer.training import run_dir as run_dir_lib
from keras_transformer.training.config import TrainConfig


@dataclasses.dataclass
class MarianModel:
    """An imported Marian checkpoint: the library's model, tokenizers and model settings.

    Attributes:
        model: the `Transformer`, built, with the checkpoint's weights.
        source_tokenizer: `MarianTokenizer` of the source side.
        target_tokenizer: `MarianTokenizer` of the target side.
        config: the Transformer's constructor arguments (`Transformer(**config)`).
    """

    model: Transformer
    source_tokenizer: MarianTokenizer
    target_tokenizer: MarianTokenizer
    config: dict


def load_marian(directory: str | os.PathLike) -> MarianModel:
    """A MarianMT checkpoint directory as the library's Transformer and tokenizers.

    Args:
        directory: what `save_pretrained` writes for a `MarianMTModel` and its
            `MarianTokenizer` (or `huggingface-cli download
            Helsinki-NLP/opus-mt-en-de --local-dir DIR` fetches).

    Returns:
        a `MarianModel`: `.model`, `.source_tokenizer`, `.target_tokenizer`,
        `.config`.

    Raises:
        CheckpointError (a ValueError): a file missing or damaged, weights
            whose shapes do not match config.json, or a setting the library
            does not compute; one line naming the file or the setting.
    """
    spec = read_spec(directory)
    source_tokenizer, target_tokenizer = _tokenizers(spec)
    tensors = _Tensors(
        read_weights(spec.directory), spec.directory / SAFETENSORS_FILE, spec.tied_output
    )
    model = Transformer(**spec.model_kwargs)
    ones = np.ones((1, 2), "int32")
    model((ones, ones), training=False)  # builds every weight
    _assign(model, tensors, spec)
    tensors.check_all_used()
    return MarianModel(model, source_tokenizer, target_tokenizer, dict(spec.model_kwargs))


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
    run_dir = Path(run_dir)
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise CheckpointError(f"{run_dir} exists and is not empty: import into a new directory.")
    imported = load_marian(directory)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{run_dir.name}.partial-", dir=run_dir.parent))
    try:
        _write_run(imported, Path(directory), partial)
        if run_dir.exists():
            run_dir.rmdir()  # empty, checked above
        partial.rename(run_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return run_dir


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


def _write_run(imported: MarianModel, checkpoint: Path, run_dir: Path) -> None:
    source_file, target_file = run_dir_lib.TOKENIZER_FILES["marian"][:2]
    imported.source_tokenizer.save(run_dir / source_file)
    imported.target_tokenizer.save(run_dir / target_file)
    model_kwargs = imported.config
    settings = {
        name: value
        for name, value in model_kwargs.items()
        if name not in ("input_vocab_size", "target_vocab_size")
    }
    max_tokens = read_spec(checkpoint).max_tokens
    training = TrainConfig(tokenizer="marian", max_tokens=max_tokens, **settings)
    tokenizer_settings = training.tokenizer_kwargs()
    run_config = {
        "model": model_kwargs,
        "tokenizer": tokenizer_settings,
        "training": dataclasses.asdict(training),
        "pretrained": {"kind": "marian", "checkpoint": str(checkpoint.resolve())},
        "files": run_dir_lib.tokenizer_fingerprints(run_dir, tokenizer_settings),
    }
    run_dir_lib.write_config(run_dir, run_config)
    (run_dir / run_dir_lib.CHECKPOINT_DIR).mkdir()
    imported.model.save(run_dir / run_dir_lib.BEST_CHECKPOINT)


class _Tensors:
    """The checkpoint's tensors by name, each read once, with errors naming the file."""

    def __init__(self, tensors: dict[str, np.ndarray], path: Path, tied: bool):
        # MarianMTModel's names start "model."; a bare MarianModel's do not.
        self._tensors = {
            (name if name.startswith(("model.", "lm_head", "final_logits")) else f"model.{name}"): t
            for name, t in tensors.items()
        }
        self._path = path
        self._tied = tied  # an lm_head.weight saved beside a tied table is a copy
        self._used = set()

    def has(self, name: str) -> bool:
        return name in self._tensors

    def get(self, name: str, shape: tuple) -> np.ndarray:
        """Tensor `name`, which must have `shape` (as config.json makes it)."""
        if name not in self._tensors:
            raise CheckpointError(f"{self._path} lacks {name}, which config.json's shape needs.")
        value = self._tensors[name]
        if tuple(value.shape) != tuple(shape):
            raise CheckpointError(
                f"{self._path}: {name} has shape {tuple(value.shape)}, but config.json "
                f"makes it {tuple(shape)}."
            )
        self._used.add(name)
        return value.astype(np.float32)

    def first(self, names: list[str], shape: tuple) -> np.ndarray:
        """The first of `names` the checkpoint holds (tied weights are saved once)."""
        for name in names:
            if name in self._tensors:
                return self.get(name, shape)
        return self.get(names[0], shape)

    def check_all_used(self) -> None:
        """Every tensor was assigned: one left over is part of a model this is not."""
        # Positions are computed (checked in `_check_positions`); tied copies are the same.
        ignored = ("embed_positions", "embed_tokens", "model.shared")
        if self._tied:
            ignored += ("lm_head",)
        left = sorted(
            n
            for n in self._tensors
            if n not in self._used and not any(part in n for part in ignored)
        )
        if left:
            raise CheckpointError(
                f"{self._path} holds weights that config.json's shape has no place for: "
                f"{', '.join(left[:3])}{' ...' if len(left) > 3 else ''}"
            )


def _assign(model: Transformer, tensors: _Tensors, spec: MarianSpec) -> None:
    """Every weight of `model` from the checkpoint, by the variable's path (its layers'
    names, which the `.keras` format keeps too): `_weight_map` says where each comes
    from, its shape there, and how it is turned."""
    sources = _weight_map(spec)
    for variable in model.weights:
        path = variable.path.split("/", 1)[1]  # without the model's own name
        if path not in sources:
            raise CheckpointError(f"No Marian weight maps onto the model's {path} (a bug).")
        names, shape, turn = sources[path]
        variable.assign(turn(tensors.first(names, shape)))
    for stack in ("encoder", "decoder"):
        _check_positions(tensors, stack, model.max_length, spec.model_kwargs["d_model"])


def _weight_map(spec: MarianSpec) -> dict[str, tuple[list[str], tuple, object]]:
    """The model's variable paths -> (checkpoint names, the first saved is read; its
    shape there; the function that turns it into the variable's value)."""
    kwargs = spec.model_kwargs
    d, dff = kwargs["d_model"], kwargs["dff"]
    vocab_src, vocab_tgt = len(spec.source.pieces), len(spec.target.pieces)
    source_order, target_order = spec.source.order, spec.target.order

    def same(value):
        return value

    def linear(value):  # torch Linear.weight (out, in) -> Keras Dense.kernel (in, out)
        return value.T

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
            lambda value: value[source_order],  # rows in library order, [START] repeated
        ),
        "decoder/embedding/token_embedding/embeddings": (
            ["model.decoder.embed_tokens.weight"],
            (vocab_tgt, d),
            lambda value: value[target_order],
        ),
        "logits_bias": (["final_logits_bias"], (1, vocab_tgt), logits_bias),
        "final_layer/kernel": (
            ["lm_head.weight"],
            (vocab_tgt, d),
            lambda value: value[target_order].T,  # (vocab, d_model) -> columns by id
        ),
        "final_layer/bias": (["final_logits_bias"], (1, vocab_tgt), logits_bias),
    }

    def dense(ours: str, theirs: str, units_in: int, units_out: int) -> None:
        weights[f"{ours}/kernel"] = ([f"{theirs}.weight"], (units_out, units_in), linear)
        weights[f"{ours}/bias"] = ([f"{theirs}.bias"], (units_out,), same)

    def norm(ours: str, theirs: str) -> None:
        weights[f"{ours}/gamma"] = ([f"{theirs}.weight"], (d,), same)
        weights[f"{ours}/beta"] = ([f"{theirs}.bias"], (d,), same)

    def attention(ours: str, theirs: str) -> None:
        # The heads lie side by side in both layouts: no reshape.
        for our_name, their_name in (
            ("query", "q_proj"),
            ("key", "k_proj"),
            ("value", "v_proj"),
            ("attention_output", "out_proj"),
        ):
            dense(f"{ours}/mha/{our_name}", f"{theirs}.{their_name}", d, d)
        norm(f"{ours}/residual/layernorm", f"{theirs}_layer_norm")

    def feed_forward(ours: str, theirs: str) -> None:
        dense(f"{ours}/feed_forward/inner_dense", f"{theirs}.fc1", d, dff)
        dense(f"{ours}/feed_forward/output_dense", f"{theirs}.fc2", dff, d)
        norm(f"{ours}/feed_forward/residual/layernorm", f"{theirs}.final_layer_norm")

    for i in range(kwargs["num_layers"]):
        ours, theirs = f"encoder/encoder_layer_{i}", f"model.encoder.layers.{i}"
        attention(f"{ours}/self_attention", f"{theirs}.self_attn")
        feed_forward(ours, theirs)
    for i in range(kwargs["decoder_layers"] or kwargs["num_layers"]):
        ours, theirs = f"decoder/decoder_layer_{i}", f"model.decoder.layers.{i}"
        attention(f"{ours}/causal_self_attention", f"{theirs}.self_attn")
        attention(f"{ours}/cross_attention", f"{theirs}.encoder_attn")
        feed_forward(ours, theirs)
    return weights


def _check_positions(tensors: _Tensors, stack: str, length: int, d: int) -> None:
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
