"""Whether this machine computes a bfloat16 export's matrix products natively.

A bfloat16 export is fast where the CPU has bfloat16 instructions (AVX512_BF16, or
AMX's tiles) and TensorFlow runs its oneDNN kernels, which use them. Elsewhere its
products are emulated: each bfloat16 operand is widened to float32 first, and the
export runs slower than its float32 twin (benchmarks/RESULTS.md, "bfloat16 exports").
`translate`, `score` and `evaluate` say so when they load one (`slow_bfloat16_reason`).
"""

from __future__ import annotations

import os
from pathlib import Path

# /proc/cpuinfo's names of the instructions that compute bfloat16 products.
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> set[str] | None:
    """The instruction-set flags of this machine's first CPU, or None where the file
    that lists them cannot be read (not Linux)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return None


def onednn_enabled() -> bool | None:
    """Whether this process's TensorFlow runs its oneDNN kernels (TensorFlow's default
    on Linux CPUs with AVX512-VNNI, AVX512-BF16 or AMX; TF_ENABLE_ONEDNN_OPTS chooses);
    None where this TensorFlow does not say (its test is not public API)."""
    try:
        from tensorflow.python.util import _pywrap_util_port  # TensorFlow's own test

        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return None


# `slow_bfloat16_reason`'s default: this machine's (None there means "unknown").
THIS_MACHINE = "this machine's"


def slow_bfloat16_reason(flags=THIS_MACHINE, onednn=THIS_MACHINE) -> str | None:
    """Why this machine would emulate a bfloat16 export's matrix products, or None
    where it computes them natively (its CPU has AVX512_BF16 or AMX, and oneDNN's
    kernels run). `flags` (a set, or None where unknown, `cpu_flags`) and `onednn` (a
    bool, or None where unknown, `onednn_enabled`) default to this machine's."""
    flags = cpu_flags() if flags is THIS_MACHINE else flags
    onednn = onednn_enabled() if onednn is THIS_MACHINE else onednn
    if flags is not None and not flags & set(BFLOAT16_CPU_FLAGS):
        return (
            "this CPU has no bfloat16 instructions (AVX512_BF16 or AMX), so a bfloat16 "
            "export's matrix products are emulated and slower than a float32 export's"
        )
    if onednn is False:
        return (
            "TensorFlow's oneDNN kernels are off here (TF_ENABLE_ONEDNN_OPTS=0, or not "
            "this platform's default), so a bfloat16 export's matrix products are emulated "
            "and slower than a float32 export's: set TF_ENABLE_ONEDNN_OPTS=1"
        )
    if flags is None:
        return (
            "cannot tell whether this CPU has bfloat16 instructions (AVX512_BF16 or AMX); "
            "without them a bfloat16 export is slower than a float32 export"
        )
    return None
