"""Makes the torch.save files of tests/test_pretrained_weights.py, a few kB in all.

Needs torch and huggingface_hub, which the library never needs: run it with the Python
of an environment that has them (the torch version is written into versions.json):

    /path/to/refenv/bin/python tests/data/torch_pickle/make_fixtures.py

It writes, in tests/data/torch_pickle/:
- single/pytorch_model.bin: `torch.save` of `state_dict()`, as transformers' `save_pretrained`
  wrote it before safetensors: float32, float16, bfloat16, int64, int32, uint8 and bool
  tensors, a 0-d one, an empty one, a parameter (`torch._utils._rebuild_parameter`), a tied
  pair (one tensor under two names, its storage saved once), a transpose of it (not
  contiguous), a slice of it (a storage offset), a strided column, and an expanded tensor
  (stride 0: more elements than its storage);
- sharded/: the same state dict cut by `split_torch_state_dict_into_shards` into
  pytorch_model-00001-of-00002.bin and pytorch_model-00002-of-00002.bin with their
  pytorch_model.bin.index.json, as transformers' `save_pretrained(max_shard_size=...)` wrote
  them (its "weight_map" names each tensor's shard);
- legacy/pytorch_model.bin: the same saved in torch's legacy format (torch < 1.6, not a zip);
- big_endian/pytorch_model.bin: the tensors of `BIG_ENDIAN` as a big-endian machine saves
  them (their bytes swapped, its byteorder entry "big"), which torch.load reads back equal;
- expected.npz: every tensor's values as numpy (bfloat16 as float32);
- versions.json: the torch version that wrote them.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import torch
from huggingface_hub import split_torch_state_dict_into_shards

HERE = Path(__file__).resolve().parent
BIG_ENDIAN = ("float32", "float16", "bfloat16", "int64", "bool", "transposed")


def state_dict() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(78)
    shared = torch.randn(4, 3, generator=generator)
    return {
        "float32": torch.randn(2, 3, generator=generator),
        "float16": torch.randn(5, generator=generator).half(),
        # bfloat16 values whose float32 bits have low halves: the conversion must keep them.
        "bfloat16": torch.tensor([[1.0, -2.5, 3.140625], [1e-3, -65280.0, 0.0]]).bfloat16(),
        "int64": torch.arange(-3, 3),
        "int32": torch.tensor([2**31 - 1, -(2**31)], dtype=torch.int32),
        "uint8": torch.tensor([0, 255, 7], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(0.5),
        "empty": torch.zeros(0, 3),
        "parameter": torch.nn.Parameter(torch.randn(3, generator=generator)),
        "tied.encoder": shared,
        "tied.decoder": shared,
        "transposed": shared.t(),
        "rows_1_to_3": shared[1:],
        "column_2": shared[:, 2],
        "expanded": torch.arange(4.0).expand(3, 4),
    }


def expected(tensors: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {
        name: (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).detach().numpy()
        for name, tensor in tensors.items()
    }


def save_big_endian(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """`tensors` saved as torch.save does on a big-endian machine."""
    swapped = {}
    for name, tensor in tensors.items():
        bits = tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor
        swapped[name] = torch.from_numpy(bits.numpy().byteswap()).view(tensor.dtype)
    little = path.with_suffix(".little")
    torch.save(swapped, little)
    with zipfile.ZipFile(little) as source, zipfile.ZipFile(path, "w") as target:
        for entry in source.infolist():
            data = source.read(entry)
            target.writestr(entry, b"big" if entry.filename.endswith("/byteorder") else data)
    little.unlink()
    for name, tensor in torch.load(path, weights_only=True).items():
        assert torch.equal(tensor, tensors[name]), name


def main() -> None:
    tensors = state_dict()
    for folder in ("single", "sharded", "legacy", "big_endian"):
        shutil.rmtree(HERE / folder, ignore_errors=True)
        (HERE / folder).mkdir()
    torch.save(tensors, HERE / "single" / "pytorch_model.bin")
    torch.save(tensors, HERE / "legacy" / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    save_big_endian(
        {name: tensors[name] for name in BIG_ENDIAN}, HERE / "big_endian" / "pytorch_model.bin"
    )
    split = split_torch_state_dict_into_shards(
        tensors, filename_pattern="pytorch_model{suffix}.bin", max_shard_size=150
    )
    assert len(split.filename_to_tensors) == 2, split.filename_to_tensors
    for filename, names in split.filename_to_tensors.items():
        torch.save({name: tensors[name] for name in names}, HERE / "sharded" / filename)
    index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
    (HERE / "sharded" / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2))
    np.savez(HERE / "expected.npz", **expected(tensors))
    (HERE / "versions.json").write_text(json.dumps({"torch": torch.__version__}) + "\n")


if __name__ == "__main__":
    main()
