"""pytorch_model.bin read without torch, through an unpickler that only rebuilds tensors.

`torch.save` (torch >= 1.6) writes a zip archive: `<archive>/data.pkl`, a pickle whose
tensors name their storages by persistent id ('storage', type, key, location, size), and
`<archive>/data/<key>`, each storage's bytes in `<archive>/byteorder`'s order (little-endian
where that entry is absent). A pickle calls whatever its globals name, so this one may name
only what torch's `weights_only=True` loader needs for a state dict (`find_class`); any other
global is refused when the pickle names it, before it can be called. A tensor becomes a
read-only numpy view of its storage, copied only where the view is not contiguous;
bfloat16 storages become float32 as they are read, every other dtype stays as saved.

`TorchFile` reads the pickle and checks every storage's size and every tensor's bounds
when it opens, and a tensor's storage only when that tensor is asked for: an import holds
one tensor at a time beside the model, not the whole checkpoint; given a dict of the
storages read (`read`'s `storages`), tensors that share a storage (tied weights, slices)
share its memory.
"""

from __future__ import annotations

import collections
import io
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from keras_transformer.pretrained.checkpoint_error import CheckpointError

# torch's storage classes, as the pickle names them (`torch.FloatStorage`), and the numpy
# type of their elements; bfloat16 is read as its bits, float32's upper half.
STORAGE_TYPES = {
    "DoubleStorage": "f8",
    "FloatStorage": "f4",
    "HalfStorage": "f2",
    "BFloat16Storage": "u2",
    "LongStorage": "i8",
    "IntStorage": "i4",
    "ShortStorage": "i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
}
# What the pickles of torch < 1.6 start with: the pickled magic number of torch's legacy format.
LEGACY_MAGIC = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)


@dataclass(frozen=True)
class _StorageType:
    name: str  # a key of STORAGE_TYPES


@dataclass(frozen=True)
class _Storage:
    entry: str  # its archive entry
    kind: str  # a key of STORAGE_TYPES
    dtype: np.dtype  # as saved, in the archive's byte order
    size: int  # elements


@dataclass(frozen=True)
class _Tensor:
    """A view of a storage, checked to lie within it; read by `TorchFile.read`."""

    storage: _Storage
    offset: int
    shape: tuple
    stride: tuple


class TorchFile:
    """A `torch.save`d state dict, open: its tensors' shapes by name (`shapes`), and each
    tensor read when asked for (`read`). CheckpointError, on opening, if it is not one."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self._archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile as error:
            with open(path, "rb") as file:
                if file.read(len(LEGACY_MAGIC)) == LEGACY_MAGIC:
                    raise CheckpointError(
                        f"{path} is in torch's legacy format (torch < 1.6), which is not read: "
                        "load it and torch.save it again with a recent torch."
                    ) from None
            raise CheckpointError(
                f"{path} is not the zip archive torch.save writes (truncated or damaged?): {error}"
            ) from None
        try:
            self._tensors = self._unpickle()
        except BaseException:
            self._archive.close()
            raise
        self.shapes = {name: tensor.shape for name, tensor in self._tensors.items()}

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()

    def close(self) -> None:
        self._archive.close()

    def read(self, name: str, storages: dict | None = None) -> np.ndarray:
        """Tensor `name`, read-only; `storages` (entry -> values), where given, keeps each
        storage read, for the tensors that share it."""
        tensor = self._tensors[name]
        storage = tensor.storage
        try:
            if storages is None or storage.entry not in storages:
                values = self._values(storage)
                if storages is not None:
                    storages[storage.entry] = values
            else:
                values = storages[storage.entry]
        except (zipfile.BadZipFile, OSError, EOFError) as error:  # a CRC error, a cut file
            raise CheckpointError(
                f"{self.path}: {storage.entry} cannot be read (damaged?): {_one_line(error)}"
            ) from None
        if 0 in tensor.shape:
            view = np.zeros(tensor.shape, values.dtype)
            view.flags.writeable = False
            return view
        strides = tuple(step * values.itemsize for step in tensor.stride)
        view = np.lib.stride_tricks.as_strided(
            values[tensor.offset :], tensor.shape, strides, writeable=False
        )
        # A transpose or a column is copied in C order; a view with more elements than its
        # storage (an expanded tensor, whose strides repeat elements) stays a view, not memory.
        if view.flags.c_contiguous or view.size > len(values):
            return view
        view = view.copy()
        view.flags.writeable = False  # as the views of storage are
        return view

    def _values(self, storage: _Storage) -> np.ndarray:
        """A storage's elements, 1-D, read-only, in native byte order."""
        data = self._archive.read(storage.entry)
        values = np.frombuffer(data, storage.dtype, count=storage.size)
        if storage.kind == "BFloat16Storage":
            bits = values.astype(np.uint32)
            bits <<= 16
            values = bits.view(np.float32)
        elif not storage.dtype.isnative:
            values = values.astype(storage.dtype.newbyteorder("="))
        values.flags.writeable = False
        return values

    def _unpickle(self) -> dict[str, _Tensor]:
        try:
            loaded = _Unpickler(self._archive, self.path).load()
        except CheckpointError:
            raise
        # A damaged archive or pickle fails in many ways (BadZipFile's CRC, EOFError,
        # UnpicklingError, a TypeError from a call with wrong arguments): all are refused.
        except Exception as error:
            raise CheckpointError(
                f"{self.path}: its pickle does not rebuild tensors (damaged?): {_one_line(error)}"
            ) from None
        if not isinstance(loaded, dict) or not all(
            isinstance(name, str) and isinstance(value, _Tensor) for name, value in loaded.items()
        ):
            raise CheckpointError(
                f"{self.path} holds a {type(loaded).__name__} that is not a dict of tensors by "
                "name (a state dict)."
            )
        return dict(loaded)


class _Unpickler(pickle.Unpickler):
    def __init__(self, archive: zipfile.ZipFile, path: Path):
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise CheckpointError(f"{path} holds no <archive>/data.pkl: not written by torch.save.")
        self._prefix = pickles[0].removesuffix("data.pkl")
        super().__init__(io.BytesIO(archive.read(pickles[0])))
        self._archive, self._path = archive, path
        order = self._entry("byteorder", "little")
        self._order = {"little": "<", "big": ">"}.get(order.decode("ascii", "replace").strip())
        if self._order is None:
            raise CheckpointError(f"{path}: its byteorder entry says {order!r}.")
        self._storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str):
        allowed = {
            "collections.OrderedDict": collections.OrderedDict,
            "torch._utils._rebuild_tensor": self._tensor,
            "torch._utils._rebuild_tensor_v2": self._tensor,
            "torch._utils._rebuild_parameter": _parameter,
            "torch._utils._rebuild_parameter_with_state": _parameter,
            **{f"torch.{storage}": _StorageType(storage) for storage in STORAGE_TYPES},
        }
        found = allowed.get(f"{module}.{name}")
        if found is None:
            raise CheckpointError(
                f"{self._path}: refuses the pickle's global {_one_line(f'{module}.{name}')} "
                "(only tensors are read; a pickle can run code)."
            )
        return found

    def persistent_load(self, pid) -> _Storage:
        if not (
            isinstance(pid, tuple)
            and len(pid) == 5
            and pid[0] == "storage"
            and isinstance(pid[1], _StorageType)
            and isinstance(pid[2], str)
            and _is_int(pid[4])
        ):
            raise CheckpointError(f"{self._path}: its pickle names a storage as {pid!r:.100}.")
        _, kind, key, _, size = pid
        if key not in self._storages:
            dtype = np.dtype(STORAGE_TYPES[kind.name]).newbyteorder(self._order)
            entry = self._prefix + f"data/{key}"
            try:
                stored = self._archive.getinfo(entry).file_size
            except KeyError:
                raise self._lacks(entry) from None
            if size < 0 or stored < size * dtype.itemsize:
                raise CheckpointError(
                    f"{self._path}: {entry} holds {stored} bytes, fewer than "
                    f"its {size} elements of {dtype.itemsize} (truncated or damaged?)."
                )
            self._storages[key] = _Storage(entry, kind.name, dtype, size)
        return self._storages[key]

    def _entry(self, name: str, default: str) -> bytes:
        try:
            return self._archive.read(self._prefix + name)
        except KeyError:
            return default.encode()

    def _lacks(self, entry: str) -> CheckpointError:
        return CheckpointError(
            f"{self._path} lacks {entry}, which its pickle names (truncated or damaged?)."
        )

    def _tensor(self, storage, offset, size, stride, *_) -> _Tensor:
        """torch._utils._rebuild_tensor(_v2): the view (offset, size, stride) of `storage`,
        in elements; the bounds are checked, as `as_strided` would read past them."""
        if not (
            isinstance(storage, _Storage)
            and _is_int(offset)
            and isinstance(size, tuple)
            and isinstance(stride, tuple)
            and len(size) == len(stride)
            and all(_is_int(n) and n >= 0 for n in size + stride)
        ):
            raise CheckpointError(
                f"{self._path}: its pickle rebuilds a tensor from other than a storage, offset, "
                "size and stride."
            )
        last = offset + sum((n - 1) * step for n, step in zip(size, stride))
        if 0 not in size and (offset < 0 or last >= storage.size):
            raise CheckpointError(
                f"{self._path}: a tensor of shape {size} at element {offset} reads past its "
                f"storage's {storage.size} elements (truncated or damaged?)."
            )
        return _Tensor(storage, offset, size, stride)


def _parameter(data, *_):
    """torch._utils._rebuild_parameter(_with_state): the tensor; gradients are not read."""
    return data


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _one_line(text) -> str:
    return " ".join(str(text).split())
