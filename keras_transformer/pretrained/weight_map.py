"""A checkpoint's tensors assigned onto the library's Transformer, by name: what every
importer shares.

transformers' encoder-decoder translators (Marian, M2M-100 / NLLB, mBART) descend from
BART and name their blocks alike (`self_attn`, `encoder_attn`, `fc1`, `fc2` and their
layer norms); `block_weights` maps those onto the library's blocks, and each family
adds its embeddings, positions and projection. Each map entry says which checkpoint
names hold a weight (tied weights are saved once, under any of them), its shape there,
and how it turns into the variable's value: torch's `Linear.weight` is `(out, in)`,
Keras' `Dense.kernel` is `(in, out)`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import keras
import numpy as np

from keras_transformer.pretrained.safetensors_io import CheckpointError, CheckpointWeights

# Rows a block when a reordered table is written into its variable (`Rows`): 64 MB of a
# 1024-wide float32 table.
ROWS_PER_BLOCK = 16384


def same(value):
    return value


def linear(value):  # torch Linear.weight (out, in) -> Keras Dense.kernel (in, out)
    return value.T


@dataclasses.dataclass(frozen=True)
class Rows:
    """A table's rows taken in `order` (library id -> checkpoint row). On TensorFlow the
    variable is written a block of rows at a time, in place, so that a 256k-row table is
    never copied whole beside the one read (each copy of NLLB's is 1 GB); other backends'
    arrays are immutable, and take the reordered table whole."""

    order: np.ndarray

    def __call__(self, value: np.ndarray) -> np.ndarray:
        return value[self.order]

    def assign(self, variable, value: np.ndarray) -> None:
        if keras.backend.backend() != "tensorflow":
            variable.assign(self(value))
            return
        import tensorflow as tf

        for start in range(0, len(self.order), ROWS_PER_BLOCK):
            block = self.order[start : start + ROWS_PER_BLOCK]
            rows = tf.range(start, start + len(block))
            # A scatter writes in place; a sliced assign would copy the whole table first.
            variable.value.scatter_update(tf.IndexedSlices(value[block], rows))


def build_for_import(model) -> None:
    """Builds `model` (a `Transformer`: every weight made, at random, for the checkpoint
    to overwrite) without calling it: a call's tied projection would transpose NLLB's
    256k x 1024 table (1 GB more, which TensorFlow's allocator on oneDNN kernels keeps)."""
    model.build(((None, None), (None, None)))


class CheckpointTensors:
    """The checkpoint's tensors by name (`open_weights`), each read when asked for, with
    errors naming the file."""

    def __init__(self, tensors: CheckpointWeights, path: Path, ignored=()):
        # A full model's names start "model."; a bare encoder-decoder's do not.
        self._source = tensors
        self._names = {
            (
                name if name.startswith(("model.", "lm_head", "final_logits")) else f"model.{name}"
            ): name
            for name in tensors
        }
        self._path = path
        self._ignored = tuple(ignored)  # name parts that may be left over (tied copies)
        self._used = set()

    def has(self, name: str) -> bool:
        return name in self._names

    def get(self, name: str, shape: tuple) -> np.ndarray:
        """Tensor `name`, which must have `shape` (as config.json makes it), in float32 (the
        array read, where it was saved in float32: it may be read-only)."""
        if name not in self._names:
            raise CheckpointError(f"{self._path} lacks {name}, which config.json's shape needs.")
        saved = self._source.shape(self._names[name])  # from the header: nothing read yet
        if saved != tuple(shape):
            raise CheckpointError(
                f"{self._path}: {name} has shape {saved}, but config.json makes it {tuple(shape)}."
            )
        self._used.add(name)
        return self._source[self._names[name]].astype(np.float32, copy=False)

    def first(self, names: list[str], shape: tuple) -> np.ndarray:
        """The first of `names` the checkpoint holds (tied weights are saved once)."""
        for name in names:
            if name in self._names:
                return self.get(name, shape)
        return self.get(names[0], shape)

    def check_all_used(self) -> None:
        """Every tensor was assigned: one left over is part of a model this is not."""
        left = sorted(
            n
            for n in self._names
            if n not in self._used and not any(part in n for part in self._ignored)
        )
        if left:
            raise CheckpointError(
                f"{self._path} holds weights that config.json's shape has no place for: "
                f"{', '.join(left[:3])}{' ...' if len(left) > 3 else ''}"
            )


def assign(model, tensors: CheckpointTensors, weights: dict, family: str) -> None:
    """Every weight of `model` from the checkpoint, by the variable's path (its layers'
    names, which the `.keras` format keeps too): `weights` says where each comes
    from, its shape there, and how it is turned."""
    for variable in model.weights:
        path = variable.path.split("/", 1)[1]  # without the model's own name
        if path not in weights:
            raise CheckpointError(f"No {family} weight maps onto the model's {path} (a bug).")
        names, shape, turn = weights[path]
        # No names: a value the library computes (a bias the checkpoint lacks).
        value = tensors.first(names, shape) if names else None
        if isinstance(turn, Rows):
            turn.assign(variable, value)
        else:
            variable.assign(turn(value))


def block_weights(weights: dict, model_kwargs: dict) -> dict:
    """`weights` with every encoder and decoder block's entries added (BART's names)."""
    d, dff = model_kwargs["d_model"], model_kwargs["dff"]

    def dense(ours: str, theirs: str, units_in: int, units_out: int) -> None:
        weights[f"{ours}/kernel"] = ([f"{theirs}.weight"], (units_out, units_in), linear)
        weights[f"{ours}/bias"] = ([f"{theirs}.bias"], (units_out,), same)

    def attention(ours: str, theirs: str) -> None:
        # The heads lie side by side in both layouts: no reshape.
        for our_name, their_name in (
            ("query", "q_proj"),
            ("key", "k_proj"),
            ("value", "v_proj"),
            ("attention_output", "out_proj"),
        ):
            dense(f"{ours}/mha/{our_name}", f"{theirs}.{their_name}", d, d)
        norm(weights, f"{ours}/residual/layernorm", f"{theirs}_layer_norm", d)

    def feed_forward(ours: str, theirs: str) -> None:
        dense(f"{ours}/feed_forward/inner_dense", f"{theirs}.fc1", d, dff)
        dense(f"{ours}/feed_forward/output_dense", f"{theirs}.fc2", dff, d)
        norm(weights, f"{ours}/feed_forward/residual/layernorm", f"{theirs}.final_layer_norm", d)

    for i in range(model_kwargs["num_layers"]):
        ours, theirs = f"encoder/encoder_layer_{i}", f"model.encoder.layers.{i}"
        attention(f"{ours}/self_attention", f"{theirs}.self_attn")
        feed_forward(ours, theirs)
    for i in range(model_kwargs["decoder_layers"] or model_kwargs["num_layers"]):
        ours, theirs = f"decoder/decoder_layer_{i}", f"model.decoder.layers.{i}"
        attention(f"{ours}/causal_self_attention", f"{theirs}.self_attn")
        attention(f"{ours}/cross_attention", f"{theirs}.encoder_attn")
        feed_forward(ours, theirs)
    return weights


def norm(weights: dict, ours: str, theirs: str, d: int) -> None:
    """A layer norm's entries: `ours`/gamma and /beta from `theirs`.weight and .bias."""
    weights[f"{ours}/gamma"] = ([f"{theirs}.weight"], (d,), same)
    weights[f"{ours}/beta"] = ([f"{theirs}.bias"], (d,), same)
