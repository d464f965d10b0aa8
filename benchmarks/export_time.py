"""CPU seconds to export a small model with all six signatures against one, in turn.

    PYTHONPATH=. python benchmarks/export_time.py [--rounds 3] [--signatures serving_default]

The model is the tests' tiny number-words Transformer (two blocks, d_model 16), untrained:
an export's cost is its tracing, which the weights do not change. Each round exports all
six signatures, then only `--signatures`, in one process (each export traces a fresh
frozen translator, so neither reuses the other's graphs). Printed per export: its CPU
seconds and the size of its saved_model.pb; then the median of each and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

from keras_transformer.constants import RESERVED_TOKENS
from keras_transformer.inference import export
from keras_transformer.inference.translator import Translator
from keras_transformer.text.tokenizers import Tokenizer
from tests.helpers import tiny_transformer, tiny_transformer_kwargs


def tiny_translator() -> Translator:
    words = "zero one two three four five six seven eight nine".split()
    source = Tokenizer(RESERVED_TOKENS + words)
    target = Tokenizer(RESERVED_TOKENS + [str(digit) for digit in range(10)])
    config = tiny_transformer_kwargs(
        input_vocab_size=source.vocab_size,
        target_vocab_size=target.vocab_size,
        num_layers=2,
        max_length=24,
    )
    model = tiny_transformer(**config)
    model((np.ones((1, 4), "int64"), np.ones((1, 4), "int64")))  # create the weights
    return Translator(model, source, target, max_length=16, beam_width=3, sub_batch_size=16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--signatures", default="serving_default", help="comma-separated")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.signatures.split(",")]
    export.chosen_signatures(chosen)
    translator = tiny_translator()
    root = tempfile.mkdtemp()
    seconds = {"all six": [], args.signatures: []}
    for _ in range(args.rounds):
        for label, signatures in (("all six", None), (args.signatures, chosen)):
            start = time.process_time()
            path = export.export_translator(translator, root, "tiny", signatures=signatures)
            seconds[label].append(time.process_time() - start)
            kilobytes = (path / "saved_model.pb").stat().st_size / 1000
            print(f"{label}: {seconds[label][-1]:.1f} s CPU, saved_model.pb {kilobytes:.0f} kB")
    medians = {label: statistics.median(times) for label, times in seconds.items()}
    listed = ", ".join(f"{label} {median:.1f} s" for label, median in medians.items())
    print(f"median: {listed}; ratio {medians[args.signatures] / medians['all six']:.2f}")


if __name__ == "__main__":
    main()
