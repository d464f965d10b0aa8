"""How much of a batched decoding call runs rows that have already ended.

A search steps all its rows until its longest row ends, so a row that ended early
keeps costing a row's work each step. This counts, for an export's translations
of `--batch` sentences at a time, the row-steps of rows still decoding against
all row-steps run: each row needs its output's pieces plus [END]; its search (the
rows split by source length as `inference.sub_batches.in_sub_batches` splits a batch of at
most `sub_batch_size` rows between two searches in flight) runs as many steps
as its longest row. For beam search a row is a sentence and its length its
chosen translation's: its other hypotheses may run longer, so read that figure
as an estimate.

    PYTHONPATH=. python benchmarks/ended_rows.py EXPORT --source test.en \
        --spm runs/RUN/spm_joint.model [--sentences 128] [--batch 64]
"""

from __future__ import annotations

import argparse

import numpy as np
import sentencepiece
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the export's tokenizer ops)


def live_share(translate, sentences, pieces, batch: int) -> tuple[int, int]:
    """(row-steps of live rows, row-steps run) over `sentences` in calls of `batch`."""
    from keras_transformer.inference import sub_batches

    live = run = 0
    for start in range(0, len(sentences), batch):
        texts = sentences[start : start + batch]
        outputs = translate(text=tf.constant(texts))["translation"].numpy()
        needed = np.array([len(pieces.encode(o.decode())) + 1 for o in outputs])
        source = np.array([len(pieces.encode(t)) + 2 for t in texts])  # [START], [END]
        order = np.argsort(source, kind="stable")
        if len(texts) < 2:
            bounds = [0, len(texts)]
        else:
            bounds = sub_batches.two_way_split(tf.constant(source[order])).numpy().tolist()
        for begin, end in zip(bounds[:-1], bounds[1:], strict=False):
            rows = needed[order][begin:end]
            live += int(rows.sum())
            run += len(rows) * int(rows.max())
    return live, run


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("saved_model", help="an export (a version directory or its parent)")
    parser.add_argument("--source", required=True, help="source sentences, one a line")
    parser.add_argument("--spm", required=True, help="the run's SentencePiece model")
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args(argv)

    from keras_transformer.inference.export import latest_version_dir

    model = tf.saved_model.load(str(latest_version_dir(args.saved_model)))
    pieces = sentencepiece.SentencePieceProcessor(model_file=args.spm)
    with open(args.source, encoding="utf-8") as f:
        sentences = [line.rstrip("\n") for _, line in zip(range(args.sentences), f, strict=False)]
    for name in ("serving_default", "beam_search"):
        live, run = live_share(model.signatures[name], sentences, pieces, args.batch)
        print(f"{name}: row-steps of live rows {live:,} of {run:,} run ({live / run:.0%})")


if __name__ == "__main__":
    main()
