"""A dense layer's matmul and bias on this machine's TensorFlow CPU kernels.

TensorFlow's graph optimizer (grappler's remapper) fuses a MatMul with the BiasAdd
after it, and with a residual AddV2 after that, into one kernel. On TensorFlow's
Eigen kernels the fused kernel costs what the MatMul does; on its oneDNN kernels
(on by default on Linux on CPUs with AVX512-VNNI, AVX512-BF16 or AMX) it cost 2-5x
the bare MatMul at the 1 and 64 rows of decoding steps. The decoder
step's dense layers are these forms; a bias subtracted as a negated row is not
fused (grappler fuses no Sub), the form tried against it. Each form runs as 25
chained layers in a `while` loop with an unknown row count, as in an export:

    PYTHONPATH=. python benchmarks/bias_add.py                              # TensorFlow's default
    TF_ENABLE_ONEDNN_OPTS=0 PYTHONPATH=. python benchmarks/bias_add.py      # Eigen kernels
"""

import argparse
import time

import tensorflow as tf
from common import cpu_kernels

LAYERS = 25


def forms():
    """name -> layer(x, kernel, bias, negated bias row)."""
    return {
        "MatMul": lambda x, k, b, n: tf.matmul(x, k),
        "BiasAdd(MatMul)": lambda x, k, b, n: tf.nn.bias_add(tf.matmul(x, k), b),
        "MatMul - negated row": lambda x, k, b, n: tf.matmul(x, k) - n,
        "x + BiasAdd(MatMul)": lambda x, k, b, n: x + tf.nn.bias_add(tf.matmul(x, k), b),
        "x + (MatMul - negated row)": lambda x, k, b, n: x + (tf.matmul(x, k) - n),
    }


def time_form(layer, x, kernel, bias, iterations, repeats):
    """Microseconds per layer, best of `repeats` calls of `iterations` loop steps."""
    width = kernel.shape[0]

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, width]),  # rows unknown when traced, as in an export
            tf.TensorSpec([width, width]),
            tf.TensorSpec([width]),
        ]
    )
    def run(x, kernel, bias):
        negated = -tf.reshape(bias, [1, -1])

        def body(i, x):
            for _ in range(LAYERS):
                x = layer(x, kernel, bias, negated)
            return i + 1, x

        return tf.while_loop(lambda i, x: i < iterations, body, (0, x))[1]

    run(x, kernel, bias)  # trace and warm up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run(x, kernel, bias).numpy()
        best = min(best, time.perf_counter() - start)
    return best / iterations / LAYERS * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--width", type=int, default=128, help="d_model (default 128)")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="passes over all forms")
    args = parser.parse_args()

    kernels = cpu_kernels()
    print(f"TensorFlow {tf.__version__}, {kernels} kernels; {LAYERS} layers of width {args.width}")
    kernel = tf.random.normal([args.width, args.width], stddev=args.width**-0.5)
    bias = tf.random.normal([args.width], stddev=0.1)
    for rows in args.rows:
        x = tf.random.normal([rows, args.width])
        best = {}
        for _ in range(args.rounds):  # rounds interleave the forms against drift
            for name, layer in forms().items():
                us = time_form(layer, x, kernel, bias, args.iterations, args.repeats)
                best[name] = min(best.get(name, us), us)
        for name, us in best.items():
            print(f"rows {rows:4d}  {name:28s} {us:8.2f} us a layer")


if __name__ == "__main__":
    main()
