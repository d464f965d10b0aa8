"""Self-attention forward + backward with whole queries and with query chunks.

Times a tutorial-size `GlobalSelfAttention` layer (d_model 128, 8 heads of 16)
on a (batch, length) batch at each length, as one `tf.function` whose lengths
are unknown when traced (as under `fit` on bucketed batches), with
`chunk_queries=False` and `=True` (layers/query_chunks.py), in alternation;
prints the medians, their ratio, and each variant's trace time.

    PYTHONPATH=. python benchmarks/attention.py [--lengths 24 32 48 72 104]
"""

import argparse
import time

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="+", default=[24, 32, 48, 72, 104])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)

    import keras
    import tensorflow as tf

    from keras_transformer import GlobalSelfAttention

    d_model = 128
    steps, trace_seconds = {}, {}
    for chunk in (False, True):
        keras.utils.set_random_seed(0)
        layer = GlobalSelfAttention(d_model, num_heads=8, chunk_queries=chunk)

        @tf.function(
            input_signature=[
                tf.TensorSpec((None, None, d_model)),
                tf.TensorSpec((None, None), tf.bool),
            ]
        )
        def step(x, mask, layer=layer):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, padding_mask=mask, training=True)
                loss = tf.reduce_sum(y * y)
            return tape.gradient(loss, [x] + layer.trainable_variables)

        start = time.perf_counter()
        step.get_concrete_function()
        trace_seconds[chunk] = time.perf_counter() - start
        steps[chunk] = step

    rng = np.random.default_rng(0)
    print(f"trace: whole {trace_seconds[False]:.2f} s, chunked {trace_seconds[True]:.2f} s")
    print("length  whole ms  chunked ms  speed-up")
    for length in args.lengths:
        x = tf.constant(rng.normal(size=(args.batch, length, d_model)), tf.float32)
        real = rng.integers(length // 2, length + 1, size=args.batch)
        mask = tf.constant(np.arange(length)[None, :] < real[:, None])
        times = {False: [], True: []}
        for chunk in (False, True):
            steps[chunk](x, mask)  # warm up this length
        for i in range(args.repeats):
            for chunk in (False, True) if i % 2 == 0 else (True, False):
                start = time.perf_counter()
                [g.numpy() for g in steps[chunk](x, mask)]
                times[chunk].append(time.perf_counter() - start)
        whole, chunked = (1000 * float(np.median(times[c])) for c in (False, True))
        print(f"{length:6d}  {whole:8.2f}  {chunked:10.2f}  {whole / chunked:7.2f}x")


if __name__ == "__main__":
    main()
