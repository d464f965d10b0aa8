"""Shared benchmark helpers: the machine's matmul peak and CPU kernels, model FLOPs, the
KerasHub peer."""

import importlib.util
import os
import re
import subprocess
import time

import numpy as np

# The instruction sets that decide which kernels run and how fast, as /proc/cpuinfo names them.
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")


def matmul_peak_gflops(n: int = 2048, repeats: int = 10, trials: int = 3) -> float:
    """Best measured float32 matmul throughput of this machine, in GFLOP/s."""
    import tensorflow as tf

    a = tf.random.normal((n, n))
    b = tf.random.normal((n, n))

    @tf.function
    def run(a, b):
        c = a
        for _ in range(repeats):
            c = tf.matmul(c, b) * 1e-3  # keep values finite
        return c

    run(a, b).numpy()  # trace and warm up
    best = float("inf")
    for _ in range(trials):
        start = time.perf_counter()
        run(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 * repeats / best / 1e9


def require_peer(parser, module: str = "ctranslate2") -> None:
    """Stops with one line if the benchmark's peer `module` is not installed in this
    environment (it comes with the package's `benchmarks` extra), before any work that
    would be wasted without it."""
    if importlib.util.find_spec(module) is None:
        parser.error(f"{module} is not installed here: pip install -e '.[benchmarks]'")


def cpu_kernels() -> str:
    """The CPU kernels TensorFlow runs here: "oneDNN" (its default on Linux on CPUs with
    AVX512-VNNI, AVX512-BF16 or AMX, unless `TF_ENABLE_ONEDNN_OPTS=0`) or "Eigen"."""
    from keras_transformer.inference.bfloat16 import onednn_enabled  # loads TensorFlow

    return "oneDNN" if onednn_enabled() else "Eigen"


def cpu_model() -> str:
    """`lscpu`'s model name, the instruction sets of `REPORTED_FLAGS` it has, and the
    cores this process may use."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = re.search(r"^Model name:\s*(.+)$", text, re.MULTILINE).group(1).strip()
    except (OSError, subprocess.CalledProcessError, AttributeError):
        model = "unknown CPU (no lscpu)"
    from keras_transformer.inference.bfloat16 import cpu_flags

    flags = cpu_flags() or set()
    present = " ".join(flag for flag in REPORTED_FLAGS if flag in flags) or "none"
    cores = len(os.sched_getaffinity(0))
    return f"{model}, {cores} cores; of {' '.join(REPORTED_FLAGS)}: {present}"


def train_flops(
    source_lengths: np.ndarray,
    target_lengths: np.ndarray,
    num_layers: int,
    d_model: int,
    dff: int,
    target_vocab_size: int,
) -> float:
    """Useful training FLOPs (3x the forward matmuls) for sentences of the given real lengths.

    Counts the dense projections, feed-forward, attention scores and weighted
    sums and the output projection over real tokens only, so padding is not
    counted as useful work. Embedding look-ups, softmax and layer norms are
    ignored (they are not matmul work).
    """
    s = np.asarray(source_lengths, np.float64)
    t = np.asarray(target_lengths, np.float64)
    d, f = d_model, dff
    encoder = num_layers * s * (4 * d * d + 2 * d * f + 2 * s * d)
    decoder = num_layers * (
        t * (4 * d * d + 2 * d * f + 2 * t * d)  # self-attention + feed-forward
        + t * (2 * d * d + 2 * s * d)  # cross-attention queries/outputs, scores
        + s * 2 * d * d  # cross-attention keys/values of the source
    )
    output = t * d * target_vocab_size
    multiply_adds = float(np.sum(encoder + decoder + output))
    return 3 * 2 * multiply_adds


def keras_hub_transformer(
    num_layers: int,
    d_model: int,
    num_heads: int,
    dff: int,
    input_vocab_size: int,
    target_vocab_size: int,
    dropout_rate: float = 0.1,
    max_length: int = 128,
):
    """The same-size encoder-decoder built from KerasHub layers (functional model).

    Padding masks are passed explicitly (no `mask_zero`), so the logits carry no
    Keras mask and the same masked loss applies. Position embeddings are
    KerasHub's learned ones (`TokenAndPositionEmbedding`), the one structural
    difference from the sinusoidal encoding.
    """
    import keras
    import keras_hub

    context = keras.Input((None,), dtype="int32", name="context")
    target = keras.Input((None,), dtype="int32", name="target_in")
    context_mask = keras.ops.not_equal(context, 0)
    target_mask = keras.ops.not_equal(target, 0)
    x = keras_hub.layers.TokenAndPositionEmbedding(input_vocab_size, max_length, d_model)(context)
    for _ in range(num_layers):
        x = keras_hub.layers.TransformerEncoder(dff, num_heads, dropout=dropout_rate)(
            x, padding_mask=context_mask
        )
    y = keras_hub.layers.TokenAndPositionEmbedding(target_vocab_size, max_length, d_model)(target)
    for _ in range(num_layers):
        y = keras_hub.layers.TransformerDecoder(dff, num_heads, dropout=dropout_rate)(
            y, x, decoder_padding_mask=target_mask, encoder_padding_mask=context_mask
        )
    logits = keras.layers.Dense(target_vocab_size, dtype="float32", name="logits")(y)
    return keras.Model((context, target), logits, name="keras_hub_transformer")
