"""Writing and loading `.keras` checkpoints, including those written before the attention
core split.

A checkpoint is written whole or not at all (`atomic.write_atomically`) and
carries a record of where it came from (`RECORD_FILE` inside the archive:
the epoch and, when the epoch was validated, its validation loss), so that the file
on disk, not a second file that may disagree with it, says what it holds.

Keras stores a layer's weights under the attribute names that lead to it. The
attention projections and the layer norms sit in the attention core and the
residual wrapper (`self_attention/mha/query_dense`, `ffn/residual/layernorm`); a
checkpoint in the flat layout, with them directly on the sublayers
(`self_attention/query_dense`, `ffn/layernorm`), is rewritten to those paths in a
temporary copy and loaded from there; the file itself is left as it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

import h5py
import keras

from keras_transformer.atomic import write_atomically
from keras_transformer.models import transformer as _model  # noqa: F401  (registers the layers for loading

_WEIGHTS_FILE = "model.weights.h5"
# The record inside a checkpoint archive; Keras ignores archive members it does not know.
RECORD_FILE = "keras_transformer.json"
_SUBLAYERS = r"(self_attention|causal_self_attention|cross_attention|ffn)"
# (old path pattern, new path) pairs, applied to every weight's path in the file.
_V0_RENAMES = (
    (
        re.compile(
            _SUBLAYERS + r"/(query_dense|key_dense|value_dense|output_dense|weights_dropout)/"
        ),
        r"\1/mha/\2/",
    ),
    (re.compile(_SUBLAYERS + r"/layernorm/"), r"\1/residual/layernorm/"),
    (re.compile(_SUBLAYERS + r"/(output_)?dropout/"), r"\1/residual/dropout/"),
)
# Only attention sublayers hold these directly in the old layout (FeedForward's
# own output_dense stays where it is).
_ATTENTION_ONLY = re.compile(r"(^|/)ffn/mha/")


def _new_path(path: str) -> str:
    """A weight or group path (ending in "/") of the old layout, in the new one."""
    for pattern, replacement in _V0_RENAMES:
        renamed = pattern.sub(replacement, path)
        if not _ATTENTION_ONLY.search(renamed):
            path = renamed
    return path


def _items(weights: h5py.File) -> list[tuple[str, h5py.Group | h5py.Dataset]]:
    found = []
    weights.visititems(lambda name, obj: found.append((name, obj)))
    return found


def _is_v0(weights: h5py.File) -> bool:
    return any(_new_path(name + "/") != name + "/" for name, _ in _items(weights))


def _migrate(weights: h5py.File, path: Path) -> None:
    """Writes the weights file `path`: `weights` with every group and dataset under its new
    path, attributes kept."""
    with h5py.File(path, "w") as out:
        for key, value in weights.attrs.items():
            out.attrs[key] = value
        for name, obj in _items(weights):  # parents come before their children
            new_name = _new_path(name + "/")[:-1]
            if isinstance(obj, h5py.Group):
                target = out.require_group(new_name)
            else:
                target = out.create_dataset(new_name, data=obj[()])
            for key, value in obj.attrs.items():
                target.attrs[key] = value


def save_checkpoint(model, path: str | os.PathLike, **record) -> Path:
    """Saves `model` (with its optimizer) to the `.keras` file `path`, with `record`
    (JSON values, such as epoch=3, val_loss=1.2) inside; a kill leaves the old file."""

    def write(partial: Path) -> None:
        # Keras builds a `.keras` file's weights in memory first where it judges memory
        # sufficient (2.5 GB more for a 600M model, and its optimizer's slots again):
        # saved as a directory, they go straight to disk, and are zipped as Keras lays
        # out its archive (stored, not compressed), with the record beside them.
        with _scratch_directory(partial.parent) as scratch:
            model.save(scratch / "model", zipped=False)
            with zipfile.ZipFile(partial, "w") as archive:
                for file in sorted((scratch / "model").rglob("*")):
                    if file.is_file():
                        archive.write(file, file.relative_to(scratch / "model").as_posix())
                archive.writestr(RECORD_FILE, json.dumps(record))

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(path, write)


def copy_checkpoint(source: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Copies the checkpoint file `source` to `path`, record and all; a kill leaves the old
    file. The same state under a second name costs a file copy instead of a second save
    (which serializes every weight and optimizer slot again), and stays a file of its own:
    damage to one after it is written leaves the other whole."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(path, lambda partial: shutil.copyfile(source, partial))


def read_record(path: str | os.PathLike) -> dict | None:
    """The record `save_checkpoint` put in the checkpoint at `path`: None if the file is
    missing or damaged (cut short, or failing its checksums), {} if it was written
    without one (by earlier versions)."""
    try:
        with zipfile.ZipFile(path) as archive:
            if _WEIGHTS_FILE not in archive.namelist() or archive.testzip() is not None:
                return None
            if RECORD_FILE not in archive.namelist():
                return {}
            return json.loads(archive.read(RECORD_FILE))
    except (OSError, zipfile.BadZipFile, ValueError):
        return None


def load_model(path: str | os.PathLike, compile: bool = False):
    """The model in the `.keras` file at `path`, migrating the flat weight layout.

    A file that is not a whole checkpoint raises ValueError naming it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Checkpoint {path} is missing.")
    if read_record(path) is None:
        raise ValueError(
            f"Checkpoint {path} is damaged or cut short (not a whole .keras archive); "
            "train again on the run directory to rewrite it, or pick another checkpoint."
        )
    # Unzipped and loaded as a directory: Keras reads a `.keras` file's weights into
    # memory whole where it judges memory sufficient (2.5 GB beside the model's own for
    # a 600M model); from a directory it reads them from the file, a weight at a time.
    with _scratch_directory(path.parent) as scratch:
        with zipfile.ZipFile(path) as archive:
            archive.extractall(scratch, [n for n in archive.namelist() if n != RECORD_FILE])
        weights_path = scratch / _WEIGHTS_FILE
        with h5py.File(weights_path, "r") as weights:
            old_layout = _is_v0(weights)
            if old_layout:
                _migrate(weights, scratch / "migrated.h5")
        if old_layout:
            (scratch / "migrated.h5").replace(weights_path)
        return keras.models.load_model(scratch, compile=compile)


@contextlib.contextmanager
def _scratch_directory(near: Path):
    """A temporary directory beside `near` (the same disk as the checkpoint, as Keras
    places its own), or in the system's temporary directory where `near` is read-only."""
    try:
        scratch = tempfile.TemporaryDirectory(dir=near, prefix=".keras-scratch-")
    except OSError:
        scratch = tempfile.TemporaryDirectory(prefix=".keras-scratch-")
    with scratch as name:
        yield Path(name)


def average(paths) -> keras.Model:
    """The model of the first checkpoint with every weight the mean over all `paths`.

    Averaging the last few epochs' weights smooths the noise of the final
    updates (Vaswani et al. average the last 5 or 20 checkpoints); it works on
    checkpoints of one run, which share their architecture.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("No checkpoints to average.")
    model = load_model(paths[0])
    sums = [w.numpy().astype("float64") for w in model.weights]
    for path in paths[1:]:
        other = load_model(path)
        if len(other.weights) != len(sums):
            raise ValueError(f"{path} does not hold the same model as {paths[0]}.")
        for total, weight in zip(sums, other.weights):
            total += weight.numpy()
    for weight, total in zip(model.weights, sums):
        weight.assign((total / len(paths)).astype(weight.dtype))
    return model


def with_dtype(model: keras.Model, dtype: str, round_weights: bool = False) -> keras.Model:
    """`model` (a built Transformer) computing under the dtype policy `dtype`: itself if
    it already does, else a copy built from its config with that policy and its weights.

    By default only policies that keep the variables' dtype are accepted ("float32" and
    the mixed policies, whose variables are float32), so the copy holds exactly the same
    weights; "bfloat16" would round them, and raises ValueError. `round_weights=True`
    accepts it: the copy's weights are the model's rounded to the nearest bfloat16 (a
    bfloat16 export, `export_translator(compute_dtype="bfloat16")`).
    """
    policy = keras.dtype_policies.get(dtype)
    if policy.name == model.dtype_policy.name:
        return model
    if policy.variable_dtype != model.dtype_policy.variable_dtype and not round_weights:
        raise ValueError(
            f"Cannot give a model with {model.dtype_policy.variable_dtype} weights the dtype "
            f"policy {policy.name!r}: its {policy.variable_dtype} weights would round them. "
            'Use "float32" or a mixed policy such as "mixed_bfloat16".'
        )
    copy = model.__class__.from_config({**model.get_config(), "dtype": policy.name})
    copy.build_from_config(model.get_build_config())
    # The cast rounds to nearest (ties to even): what `round_weights` promises.
    for target, source in zip(copy.weights, model.weights, strict=True):
        target.assign(keras.ops.cast(source.value, target.dtype))
    return copy
