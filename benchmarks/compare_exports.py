"""Two exports of one model, timed against each other: did a change to the decoder pay?

    PYTHONPATH=. python benchmarks/compare_exports.py BEFORE_EXPORT AFTER_EXPORT \
        --source ../shared/corpora/multi30k/test_2016_flickr.en [--rounds 6]

Export the same run twice, once with each version of the library (for the version
before: `PYTHONPATH=<its checkout> keras-transformer export RUN --export-root DIR`, run
from outside this checkout), then time both here in one process. First every signature's
translations and scores must agree on the batch (or the run stops); then each round
times both exports on one batch of `--sentences` and on `--singles` sentences one at a
time, in turn, the order swapped every round so that neither always runs first. Printed:
the best time of each in sentences per second, with after / before; and the median and
range of each round's own after / before (the two ran back to back, so the range shows the
machine's noise: on a 2-core VM, one search timed in both exports measured 0.77-1.23x).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the exports' tokenizer ops)

SIGNATURES = ("serving_default", "beam_search")


def _seconds(signature, batches) -> float:
    """Wall time of `signature` over `batches`, one call each."""
    start = time.perf_counter()
    for texts in batches:
        signature(text=texts)["translation"].numpy()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--source", required=True, help="source sentences, one a line")
    parser.add_argument("--sentences", type=int, default=64, help="the batch")
    parser.add_argument("--singles", type=int, default=16, help="sentences one at a time")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()

    with open(args.source, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    if len(lines) < args.sentences + args.singles:
        parser.error(f"{args.source} has {len(lines)} sentences; the run needs more")
    batch = tf.constant(lines[: args.sentences])
    singles = [tf.constant([line]) for line in lines[args.sentences :][: args.singles]]
    exports = [tf.saved_model.load(path) for path in (args.before, args.after)]

    for name in SIGNATURES:
        before, after = (export.signatures[name](text=batch) for export in exports)
        if before["translation"].numpy().tolist() != after["translation"].numpy().tolist():
            raise SystemExit(f"compare_exports.py: {name}: the translations differ")
        gap = float(np.max(np.abs(before["score"].numpy() - after["score"].numpy())))
        print(
            f"{name}: translations identical on {args.sentences} sentences, scores within {gap:.1e}"
        )
        for export in exports:  # first calls of the single-sentence shape
            export.signatures[name](text=singles[0])

    # seconds[(name, which)]: one (batch, singles) pair of times per round.
    seconds = {(name, which): [] for name in SIGNATURES for which in (0, 1)}
    for round_ in range(args.rounds):
        order = (0, 1) if round_ % 2 == 0 else (1, 0)
        for name in SIGNATURES:
            for which in order:
                signature = exports[which].signatures[name]
                seconds[(name, which)].append(
                    (_seconds(signature, [batch]), _seconds(signature, singles))
                )

    # Besides the best times, each round's own after/before: the two exports of a
    # round ran back to back, so its ratio does not follow the machine's slower
    # minutes, and the spread of those ratios shows the noise.
    print(
        f"\nsentences/s, best of {args.rounds} rounds    before     after   after/before"
        "   per round: median (min-max)"
    )
    for name in SIGNATURES:
        for column, (size, label) in enumerate(
            ((args.sentences, f"batch {args.sentences}"), (args.singles, "batch 1"))
        ):
            times = [np.array([t[column] for t in seconds[(name, w)]]) for w in (0, 1)]
            before, after = (size / t.min() for t in times)
            paired = times[0] / times[1]
            print(
                f"{name:16s} {label:9s} {before:9.1f} {after:9.1f} {after / before:10.2f}x"
                f"   {np.median(paired):.2f}x ({paired.min():.2f}-{paired.max():.2f})"
            )


if __name__ == "__main__":
    main()
