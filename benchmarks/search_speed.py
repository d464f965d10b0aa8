"""The searches' speed in memory on an OPUS-MT-size model with random weights: no
checkpoint, no tokenizer, no reference environment, so that two versions of the decoding
code can be timed against each other on the same machine (one checkout each, the same
command in both, alternating).

The model has OPUS-MT's base shape (6 + 6 layers, d_model 512, 8 heads, FFN 2,048, a
shared and tied 58,101-token table); each search is traced once with
`tf.function` over int64 source ids, as an export's signatures are, and every row
decodes `--steps` tokens (`stop_at_end=False`), so that both versions do the same work.
Sources are random ids, `--source-length` tokens between [START] and [END]. Prints
sentences/s, the best of `--calls` timed calls after an untimed one; set
`TF_ENABLE_ONEDNN_OPTS=0` before the command to time Eigen's kernels, `--jit-compile`
to time the searches XLA compiles:

    PYTHONPATH=. python benchmarks/search_speed.py
    PYTHONPATH=. python benchmarks/search_speed.py --searches beam --batch-sizes 64
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from benchmarks.common import cpu_kernels, cpu_model

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=64, help="tokens decoded per sentence")
    parser.add_argument("--source-length", type=int, default=20)
    parser.add_argument(
        "--searches", nargs="+", choices=["greedy", "beam"], default=["greedy", "beam"]
    )
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 1])
    parser.add_argument("--calls", type=int, default=2, help="timed calls; the best is kept")
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile each search with XLA, on the fixed-shape caches XLA needs (as "
        "`export --jit-compile`); each batch size compiles on its untimed call",
    )
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    from keras_transformer.constants import END_ID, START_ID
    from keras_transformer.inference import beam, sampling
    from keras_transformer.models.transformer import Transformer

    keras.utils.set_random_seed(0)
    vocab = 58101
    model = Transformer(
        num_layers=6,
        d_model=512,
        num_heads=8,
        dff=2048,
        input_vocab_size=vocab,
        target_vocab_size=vocab,
        dropout_rate=0.0,
        tie_embeddings=True,
        share_embeddings=True,
    )
    ones = np.ones((1, 3), np.int32)
    model((ones, ones))  # builds it
    searches = {
        "greedy": sampling.GreedySearch(max_length=args.steps, stop_at_end=False),
        "beam": beam.BeamSearch(
            max_length=args.steps, beam_width=args.beam_width, stop_at_end=False
        ),
    }
    compiled = ", searches compiled by XLA" if args.jit_compile else ""
    print(f"{cpu_model()}; {cpu_kernels()} kernels{compiled}, TensorFlow {tf.__version__}")
    rng = np.random.default_rng(0)
    for name in args.searches:
        search = searches[name].replace(fixed_shapes=args.jit_compile)

        @tf.function(
            input_signature=[tf.TensorSpec([None, None], tf.int64)], jit_compile=args.jit_compile
        )
        def translate(source, search=search):
            return search(model, source).tokens

        for batch in args.batch_sizes:
            source = tf.constant(
                np.concatenate(
                    [
                        np.full((batch, 1), START_ID),
                        rng.integers(4, vocab, (batch, args.source_length)),
                        np.full((batch, 1), END_ID),
                    ],
                    axis=1,
                )
            )
            translate(source)  # traced, and run once
            times = []
            for _ in range(args.calls):
                start = time.perf_counter()
                translate(source).numpy()
                times.append(time.perf_counter() - start)
            label = name if name == "greedy" else f"beam {args.beam_width}"
            print(f"  {label:7s} batch {batch:3d}: {batch / min(times):7.2f} sentences/s")


if __name__ == "__main__":
    main()
