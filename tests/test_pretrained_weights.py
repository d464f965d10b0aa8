"""`read_weights` and `open_weights` on pytorch_model.bin, read without torch
(pretrained/torch_pickle.py), and on safetensors.

The files of tests/data/torch_pickle/ are torch.save's own, made by its make_fixtures.py
(torch 2.13); expected.npz holds their values. The pickles that try to run code, and the
damaged archives, are made here from them.
"""

from __future__ import annotations

import builtins
import json
import os
import pickle
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from keras_transformer.pretrained import CheckpointError, read_weights
from keras_transformer.pretrained.safetensors_io import open_weights

FIXTURES = Path(__file__).parent / "data" / "torch_pickle"
EXPECTED = dict(np.load(FIXTURES / "expected.npz"))
# What each tensor is read as: bfloat16 becomes float32, every other dtype stays.
DTYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": np.float32,
    "int64": np.int64,
    "int32": np.int32,
    "uint8": np.uint8,
    "bool": np.bool_,
    "scalar": np.float32,
    "empty": np.float32,
    "parameter": np.float32,
    "tied.encoder": np.float32,
    "tied.decoder": np.float32,
    "transposed": np.float32,
    "rows_1_to_3": np.float32,
    "column_2": np.float32,
    "expanded": np.float32,
}


def assert_expected(tensors: dict[str, np.ndarray], names=DTYPES) -> None:
    assert sorted(tensors) == sorted(names)
    for name in names:
        value = tensors[name]
        assert value.dtype == DTYPES[name], (name, value.dtype)
        assert value.shape == EXPECTED[name].shape, (name, value.shape)
        assert np.array_equal(value, EXPECTED[name]), (name, value, EXPECTED[name])
        assert not value.flags.writeable, name
        # Copies of the non-contiguous views; the expanded tensor is not copied (stride 0).
        assert value.flags.c_contiguous == (name != "expanded"), name


def test_a_bin_reads_as_torch_saved_it():
    tensors = read_weights(FIXTURES / "single")
    assert_expected(tensors)
    # bfloat16 values whose float32 bits have low halves, and exact extremes.
    assert tensors["bfloat16"].tolist() == [
        [1.0, -2.5, 3.140625],
        [0.00099945068359375, -65280.0, 0.0],
    ]
    assert tensors["int32"].tolist() == [2**31 - 1, -(2**31)]
    # The tied pair is one storage, read once: the two names share its memory.
    assert np.shares_memory(tensors["tied.encoder"], tensors["tied.decoder"])
    assert np.array_equal(tensors["transposed"], tensors["tied.encoder"].T)
    assert tensors["expanded"].strides == (0, 4)


def test_a_big_endian_bin_is_read_in_native_order():
    names = ("float32", "float16", "bfloat16", "int64", "bool", "transposed")
    assert_expected(read_weights(FIXTURES / "big_endian"), names)


def test_shards_are_read_together():
    index = json.loads((FIXTURES / "sharded" / "pytorch_model.bin.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 2
    assert_expected(read_weights(FIXTURES / "sharded"))


@pytest.mark.parametrize("safetensors_name", ["model.safetensors", "model.safetensors.index.json"])
def test_safetensors_is_read_where_both_are(safetensors_name, tmp_path):
    for path in (FIXTURES / "sharded").iterdir():
        shutil.copy(path, tmp_path)
    shutil.copy(FIXTURES / "single" / "pytorch_model.bin", tmp_path)
    save_file({"only.in.safetensors": np.ones(2, np.float32)}, tmp_path / "part.safetensors")
    if safetensors_name == "model.safetensors":
        (tmp_path / "part.safetensors").rename(tmp_path / safetensors_name)
    else:
        weight_map = {"only.in.safetensors": "part.safetensors"}
        (tmp_path / safetensors_name).write_text(json.dumps({"weight_map": weight_map}))
    assert list(read_weights(tmp_path)) == ["only.in.safetensors"]


# -- pickles that would run code -------------------------------------------------------


class Runs:
    """Unpickled, calls `function(*arguments)`: what a malicious checkpoint does."""

    def __init__(self, function, *arguments):
        self.function, self.arguments = function, arguments

    def __reduce__(self):
        return self.function, self.arguments


def bin_of(directory: Path, data_pkl: bytes) -> Path:
    """A pytorch_model.bin in `directory` whose archive holds `data_pkl` (and no storage)."""
    directory.mkdir(exist_ok=True)
    with zipfile.ZipFile(directory / "pytorch_model.bin", "w") as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        archive.writestr("archive/byteorder", "little")
    return directory


def touching(marker: Path) -> dict:
    """Ways of creating `marker`, by the global each calls."""
    return {
        "os.system": Runs(os.system, f"touch {marker}"),
        "builtins.eval": Runs(builtins.eval, f"open({str(marker)!r}, 'w').close()"),
        "subprocess.Popen": Runs(subprocess.Popen, ["touch", str(marker)]),
    }


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])  # GLOBAL, STACK_GLOBAL
@pytest.mark.parametrize("call", ["os.system", "builtins.eval", "subprocess.Popen"])
def test_a_pickle_naming_another_global_is_refused_and_nothing_runs(call, protocol, tmp_path):
    marker = tmp_path / "ran"
    payload = touching(marker)[call]
    # The global as the pickle names it (os.system is posix.system on Linux); with
    # fix_imports, protocol 2 writes Python 2's module names (__builtin__, commands).
    name = f"{payload.function.__module__}.{payload.function.__name__}"
    for fix_imports in (False, True):
        for where, top in {"alone": payload, "in_a_state_dict": {"w": payload}}.items():
            data = pickle.dumps(top, protocol, fix_imports=fix_imports)
            directory = bin_of(tmp_path / f"{where}_{fix_imports}", data)
            with pytest.raises(CheckpointError) as error:
                read_weights(directory)
            message = str(error.value)
            refusal = "pytorch_model.bin: refuses the pickle's global "
            assert refusal + (f"{name} " if not fix_imports else "") in message, message
            assert f".{payload.function.__name__} (only tensors are read" in message, message
            assert "\n" not in message
            assert not marker.exists(), f"the pickle ran {name}"
    # Unpickled as plain pickle does, the payload runs: the test's marker is sound.
    if call == "os.system":
        pickle.loads(pickle.dumps(payload, protocol))
        assert marker.exists()


# -- damaged and unreadable files ------------------------------------------------------


def rewritten(tmp_path: Path, change) -> Path:
    """A copy of the single fixture whose entries are `change(name, data)` (None drops one)."""
    source = FIXTURES / "single" / "pytorch_model.bin"
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(tmp_path / source.name, "w") as copy:
        for entry in original.namelist():
            data = change(entry.split("/", 1)[1], original.read(entry))
            if data is not None:
                copy.writestr(entry, data)
    return tmp_path


def refused(directory: Path) -> str:
    with pytest.raises(CheckpointError) as error:
        read_weights(directory)
    message = str(error.value)
    assert "\n" not in message, message
    return message


def test_a_truncated_bin_is_refused(tmp_path):
    data = (FIXTURES / "single" / "pytorch_model.bin").read_bytes()
    (tmp_path / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    message = refused(tmp_path)
    assert "pytorch_model.bin is not the zip archive torch.save writes (truncated" in message


def test_the_legacy_format_is_refused_with_what_to_do():
    message = refused(FIXTURES / "legacy")
    assert "pytorch_model.bin is in torch's legacy format" in message
    assert "torch.save it again with a recent torch" in message


def test_a_missing_storage_is_refused(tmp_path):
    message = refused(rewritten(tmp_path, lambda name, data: None if name == "data/3" else data))
    assert "pytorch_model.bin lacks pytorch_model/data/3, which its pickle names" in message


def test_a_short_storage_is_refused(tmp_path):
    directory = rewritten(tmp_path, lambda name, data: data[:-4] if name == "data/0" else data)
    message = refused(directory)
    assert "pytorch_model.bin: pytorch_model/data/0 holds 20 bytes, fewer than its 6" in message


def test_a_tensor_past_its_storage_is_refused(tmp_path):
    """The pickle's first tensor (float32, shape (2, 3), storage of 6) moved to offset 1: its
    last element would be read past the storage, where `as_strided` reads what memory holds."""
    at_0, at_1 = b"QK\x00K\x02K\x03\x86", b"QK\x01K\x02K\x03\x86"  # BINPERSID, offset, size

    def moved(name, data):
        if name == "data.pkl":
            assert data.index(at_0) < data.index(b"float16")  # float32's, the first tensor
            return data.replace(at_0, at_1, 1)
        return data

    message = refused(rewritten(tmp_path, moved))
    assert "a tensor of shape (2, 3) at element 1 reads past its storage's 6 elements" in message


def test_a_damaged_pickle_is_refused(tmp_path):
    directory = rewritten(tmp_path, lambda name, data: data[:-30] if name == "data.pkl" else data)
    assert "pytorch_model.bin: its pickle does not rebuild tensors (damaged?)" in refused(directory)


@pytest.mark.parametrize(
    "top, kind",
    [([1, 2], "list"), ({"w": 1.5}, "dict"), ({1: 2}, "dict")],
    ids=["list", "not tensors", "not names"],
)
def test_a_pickle_of_anything_but_tensors_by_name_is_refused(top, kind, tmp_path):
    message = refused(bin_of(tmp_path, pickle.dumps(top)))
    assert f"pytorch_model.bin holds a {kind} that is not a dict of tensors by name" in message


def test_a_shard_the_index_names_missing_is_refused(tmp_path):
    for path in (FIXTURES / "sharded").iterdir():
        shutil.copy(path, tmp_path)
    (tmp_path / "pytorch_model-00002-of-00002.bin").unlink()
    message = refused(tmp_path)
    assert (
        "pytorch_model-00002-of-00002.bin is missing (named by pytorch_model.bin.index.json)"
        in (message)
    )


def test_a_directory_without_weights_is_refused(tmp_path):
    assert "holds no weights: neither model.safetensors nor pytorch_model.bin" in refused(tmp_path)


# -- reading a tensor at a time ------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["single", "sharded"])
def test_open_weights_reads_each_tensor_when_asked_as_read_weights_does(fixture):
    """The lazy mapping an import reads holds every name and shape from the headers, and
    each tensor it returns equals `read_weights`' (pickles)."""
    with open_weights(FIXTURES / fixture) as weights:
        assert sorted(weights) == sorted(DTYPES)
        for name in DTYPES:
            assert weights.shape(name) == EXPECTED[name].shape
            assert np.array_equal(weights[name], EXPECTED[name]), name


def test_safetensors_tensors_are_read_in_every_dtype_bfloat16_as_float32(tmp_path):
    """safetensors' bytes are read at the header's offsets (not through the package's
    mapping); bfloat16 (which numpy lacks) becomes float32, as in a pickle."""
    values = {
        "float32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "float16": np.array([1.5, -2.0], np.float16),
        "int64": np.array([2**40, -3], np.int64),
        "bool": np.array([True, False]),
        "scalar": np.array(4.25, np.float32),
    }
    save_file(values, tmp_path / "model.safetensors")
    with open_weights(tmp_path) as weights:
        assert sorted(weights) == sorted(values)
        for name, value in values.items():
            assert weights[name].dtype == value.dtype and np.array_equal(weights[name], value)
    # bfloat16: the upper halves of float32 values that it holds exactly.
    exact = np.array([[1.0, -2.5, 3.140625], [0.00099945068359375, -65280.0, 0.0]], np.float32)
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}}).encode()
    data = (exact.view(np.uint32) >> 16).astype("<u2").tobytes()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + data)
    assert read_weights(tmp_path)["w"].tolist() == exact.tolist()


def test_a_truncated_safetensors_is_refused_when_opened(tmp_path):
    save_file({"w": np.ones((4, 4), np.float32)}, tmp_path / "model.safetensors")
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[:-8])
    message = refused(tmp_path)
    assert "model.safetensors cannot be read as safetensors (truncated or damaged?)" in message


def test_a_reordered_table_written_in_blocks_equals_the_whole_reorder(monkeypatch):
    """`Rows` writes a table into its variable a block at a time (in place, on
    TensorFlow): with blocks smaller than the table, and the [START] row repeated, it
    equals the table reordered whole."""
    import keras

    from keras_transformer.pretrained import weight_map

    monkeypatch.setattr(weight_map, "ROWS_PER_BLOCK", 3)
    table = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    order = np.array([1, 3, 2, 2, 0, 4, 5, 6, 7, 8, 9])
    variable = keras.Variable(np.zeros((11, 4), np.float32))
    weight_map.Rows(order).assign(variable, table)
    assert np.array_equal(keras.ops.convert_to_numpy(variable), table[order])
