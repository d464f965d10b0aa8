"""Where the time of one training step goes (tutorial-size model, one TED-like batch).

Times, each as its own `tf.function` on the same batch (median of --repeats):
encoder forward, decoder forward, output projection + masked loss, the whole
forward, forward + backward, and the whole step with the Adam update; the
differences give the share of backward and optimizer. `--jit` compiles each
piece with XLA, `--bf16` uses mixed_bfloat16, `--hashed-dropout` HashedDropout.

    PYTHONPATH=. python benchmarks/profile_step.py [--length 32] [--jit] [--bf16] [--hashed-dropout]
"""

import argparse
import time

import numpy as np


def median_seconds(fn, repeats):
    fn()  # trace / compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=32, help="source and target length")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--jit", action="store_true")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--hashed-dropout", action="store_true", help="HashedDropout masks")
    args = parser.parse_args(argv)

    import keras
    import tensorflow as tf

    from keras_transformer import Transformer
    from keras_transformer.training import make_optimizer, masked_loss

    if args.bf16:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    rng = np.random.default_rng(0)
    shape = (args.batch, args.length)
    context = tf.constant(rng.integers(4, args.vocab, shape), tf.int32)
    target_in = tf.constant(rng.integers(4, args.vocab, shape), tf.int32)
    target_out = tf.constant(rng.integers(4, args.vocab, shape), tf.int32)
    model = Transformer(
        4, 128, 8, 512, args.vocab, args.vocab, max_length=128, hashed_dropout=args.hashed_dropout
    )
    model((context, target_in))
    optimizer = make_optimizer(128)
    optimizer.build(model.trainable_variables)
    encoded, context_mask = model.encode(context)
    features = model.decoder(target_in, encoded, context_mask=context_mask)

    def compiled(fn):
        return tf.function(fn, jit_compile=args.jit)

    @compiled
    def encoder():
        return model.encode(context, training=True)[0]

    @compiled
    def decoder():
        return model.decoder(target_in, encoded, context_mask=context_mask, training=True)

    @compiled
    def projection_loss():
        return masked_loss(target_out, model.project(features))

    @compiled
    def forward():
        return masked_loss(target_out, model((context, target_in), training=True))

    @compiled
    def forward_backward():
        with tf.GradientTape() as tape:
            loss = masked_loss(target_out, model((context, target_in), training=True))
        return tape.gradient(loss, model.trainable_variables)

    @compiled
    def step():
        with tf.GradientTape() as tape:
            loss = masked_loss(target_out, model((context, target_in), training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def run(fn):
        # Embedding gradients are IndexedSlices: fetch their values.
        return lambda: tf.nest.map_structure(lambda t: getattr(t, "values", t).numpy(), fn())

    t = {
        name: median_seconds(run(fn), args.repeats)
        for name, fn in [
            ("encoder forward", encoder),
            ("decoder forward", decoder),
            ("output projection + loss", projection_loss),
            ("forward", forward),
            ("forward + backward", forward_backward),
            ("step", step),
        ]
    }
    t["backward"] = t["forward + backward"] - t["forward"]
    t["optimizer update"] = t["step"] - t["forward + backward"]
    print(
        f"batch {args.batch} x {args.length} tokens, vocab {args.vocab}, "
        f"jit={args.jit}, bf16={args.bf16}, hashed dropout={args.hashed_dropout}, "
        f"TensorFlow {tf.__version__}"
    )
    for name in (
        "encoder forward",
        "decoder forward",
        "output projection + loss",
        "forward",
        "backward",
        "optimizer update",
        "step",
    ):
        print(f"{name:<28}{1000 * t[name]:8.1f} ms {100 * t[name] / t['step']:6.1f}%")


if __name__ == "__main__":
    main()
