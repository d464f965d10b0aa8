"""A decoding step's key cache in plain TensorFlow (no XLA): grown by concatenation, or
allocated once at its final length and written in place.

Issue 79 (item 2) asks for caches allocated once and written in place instead of the
ConcatV2 that grows them a position a step. This times the choices on their own, in a
`tf.while_loop` of `--positions` steps, each step writing one position's keys of
`--rows` rows x `--heads` heads x `--head-size` and attending one query per row and head
over the positions written so far (an einsum and a sum, as a step's scores are):

- `concat`: the cache grows by `tf.concat` along its positions axis (what the library does);
- `read_only`: a cache of the final length, filled before the loop and never written,
  read a step as its first i+1 positions (`k[:, :, :i+1]`): the floor of any layout that
  reads a prefix;
- `strided_update`: the same cache written a step by `TensorStridedSliceUpdate` (what
  `tensor[..., i, :] = x` becomes), read as `read_only` reads it;
- `scatter_leading`: the positions axis first, `(positions, rows, heads, head_size)`,
  written by `tensor_scatter_nd_update` at `[[i]]` and read as `k[:i+1]` (a slice along
  the leading axis, which TensorFlow can hand out without a copy);
- `inplace_leading`: the leading layout written by `InplaceUpdate`, which writes into its
  input's buffer (no copy), read as `scatter_leading` reads it;
- `inplace_broadcast`: `inplace_leading` attending by broadcast products and sums, which
  read the leading layout as it is (an einsum transposes it for a batched matmul);
- `concat_broadcast`: `concat` attending the same way;
- `where`: the leading layout written by `tf.where` over all positions (what the
  searches' `fixed_shapes` caches do for XLA);
- `concat_reordered`, `inplace_reordered`: `concat` and `inplace_broadcast` with a beam
  search's reorder after each step, a gather of the cache's rows by a shuffle of them
  (rows are the first axis of `concat`'s cache, the second of the leading layout, whose
  every position of every row is then a separate copy).

Best of 3 timed calls after one untimed; run it under each kernel set:

    PYTHONPATH=. python benchmarks/cache_writes.py
    TF_ENABLE_ONEDNN_OPTS=0 PYTHONPATH=. python benchmarks/cache_writes.py
"""

from __future__ import annotations

import argparse
import os
import time

import tensorflow as tf


def variants(rows: int, heads: int, size: int, positions: int) -> dict:
    query = tf.random.normal((rows, heads, size))
    new = tf.random.normal((rows, heads, size))
    last = tf.TensorShape([])

    def loop(body, cache, invariant=None):
        invariants = None if invariant is None else (last, invariant, last)
        _, _, total = tf.while_loop(
            lambda i, k, acc: i < positions,
            body,
            (0, cache, 0.0),
            shape_invariants=invariants,
        )
        return total

    def attend(k, equation):
        return tf.reduce_sum(tf.einsum(equation, query, k))

    def attend_leading(k):
        # Broadcast product and sum over the head size: reads the leading layout as it
        # is, where an einsum transposes it for a batched matmul.
        return tf.reduce_sum(tf.reduce_sum(query[None] * k, axis=-1))

    @tf.function
    def concat():
        def body(i, k, acc):
            k = tf.concat([k, new[:, :, None, :]], axis=2)
            return i + 1, k, acc + attend(k, "rhd,rhld->rhl")

        start = tf.zeros((rows, heads, 0, size))
        return loop(body, start, tf.TensorShape([rows, heads, None, size]))

    @tf.function
    def read_only():
        def body(i, k, acc):
            return i + 1, k, acc + attend(k[:, :, : i + 1], "rhd,rhld->rhl")

        return loop(body, tf.random.normal((rows, heads, positions, size)))

    @tf.function
    def strided_update():
        def body(i, k, acc):
            k = tf.raw_ops.TensorStridedSliceUpdate(
                input=k,
                begin=[0, 0, i, 0],
                end=[rows, heads, i + 1, size],
                strides=[1, 1, 1, 1],
                value=new[:, :, None, :],
            )
            return i + 1, k, acc + attend(k[:, :, : i + 1], "rhd,rhld->rhl")

        return loop(body, tf.zeros((rows, heads, positions, size)))

    @tf.function
    def scatter_leading():
        def body(i, k, acc):
            k = tf.tensor_scatter_nd_update(k, [[i]], new[None])
            return i + 1, k, acc + attend(k[: i + 1], "rhd,lrhd->rhl")

        return loop(body, tf.zeros((positions, rows, heads, size)))

    @tf.function
    def inplace_leading():
        def body(i, k, acc):
            # InplaceUpdate writes into its input's buffer (the library's `inplace_update`
            # copies first, for safety): a fresh buffer a call, from Empty.
            k = tf.raw_ops.InplaceUpdate(x=k, i=[i], v=new[None])
            return i + 1, k, acc + attend(k[: i + 1], "rhd,lrhd->rhl")

        return loop(body, tf.raw_ops.Empty(shape=(positions, rows, heads, size), dtype=tf.float32))

    @tf.function
    def inplace_broadcast():
        def body(i, k, acc):
            k = tf.raw_ops.InplaceUpdate(x=k, i=[i], v=new[None])
            return i + 1, k, acc + attend_leading(k[: i + 1])

        return loop(body, tf.raw_ops.Empty(shape=(positions, rows, heads, size), dtype=tf.float32))

    @tf.function
    def concat_broadcast():
        def body(i, k, acc):
            k = tf.concat([k, new[:, :, None, :]], axis=2)
            return i + 1, k, acc + tf.reduce_sum(tf.reduce_sum(query[:, :, None] * k, axis=-1))

        start = tf.zeros((rows, heads, 0, size))
        return loop(body, start, tf.TensorShape([rows, heads, None, size]))

    shuffle = tf.random.shuffle(tf.range(rows), seed=0)

    @tf.function
    def concat_reordered():
        def body(i, k, acc):
            k = tf.concat([k, new[:, :, None, :]], axis=2)
            return i + 1, tf.gather(k, shuffle), acc + attend(k, "rhd,rhld->rhl")

        start = tf.zeros((rows, heads, 0, size))
        return loop(body, start, tf.TensorShape([rows, heads, None, size]))

    @tf.function
    def inplace_reordered():
        def body(i, k, acc):
            k = tf.raw_ops.InplaceUpdate(x=k, i=[i], v=new[None])
            return i + 1, tf.gather(k, shuffle, axis=1), acc + attend_leading(k[: i + 1])

        return loop(body, tf.raw_ops.Empty(shape=(positions, rows, heads, size), dtype=tf.float32))

    @tf.function
    def where():
        def body(i, k, acc):
            k = tf.where((tf.range(positions) == i)[:, None, None, None], new[None], k)
            return i + 1, k, acc + attend(k[: i + 1], "rhd,lrhd->rhl")

        return loop(body, tf.zeros((positions, rows, heads, size)))

    return dict(
        concat=concat,
        read_only=read_only,
        strided_update=strided_update,
        scatter_leading=scatter_leading,
        inplace_leading=inplace_leading,
        inplace_broadcast=inplace_broadcast,
        concat_broadcast=concat_broadcast,
        where=where,
        concat_reordered=concat_reordered,
        inplace_reordered=inplace_reordered,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=256, help="64 sentences x beam 4")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--positions", type=int, default=64)
    args = parser.parse_args()
    eigen = os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0"
    kernels = "Eigen" if eigen else "default (oneDNN where on)"
    megabytes = args.rows * args.heads * args.head_size * args.positions * 4 / 2**20
    print(
        f"{args.positions} steps, {args.rows} rows x {args.heads} heads x {args.head_size}: "
        f"a cache of {megabytes:.0f} MB at full length; TensorFlow {tf.__version__}, "
        f"{kernels} kernels"
    )
    for name, function in variants(args.rows, args.heads, args.head_size, args.positions).items():
        function()  # traced, and run once
        times = []
        for _ in range(3):
            start = time.perf_counter()
            function()
            times.append(time.perf_counter() - start)
        print(f"  {name:18s} {min(times) * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
