"""Whether a machine computes bfloat16 matrix products natively (`inference/bfloat16.py`)."""

import pytest

from keras_transformer.inference import bfloat16


@pytest.mark.parametrize(
    "flags, onednn, slow",
    [
        ({"avx2", "avx512_bf16"}, True, None),
        ({"avx2", "amx_bf16", "amx_tile"}, True, None),
        ({"avx2", "fma"}, True, "no bfloat16 instructions"),
        ({"avx2", "avx512_bf16"}, False, "oneDNN kernels are off"),
        (None, True, "cannot tell"),
    ],
)
def test_bfloat16_is_native_with_the_cpu_s_instructions_and_onednn(flags, onednn, slow):
    reason = bfloat16.slow_bfloat16_reason(flags, onednn)
    assert reason is None if slow is None else slow in reason


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nflags : other\n")
    assert bfloat16.cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"}
    assert bfloat16.cpu_flags(tmp_path / "absent") is None
