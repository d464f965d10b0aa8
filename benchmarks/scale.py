"""Corpus scale: prepared data against text files, at 200k and 3M pairs.

For each corpus size it prints, each measured in a process of its own (its
peak resident memory is its own):
- prepare: wall time and peak RSS of `keras_transformer.training.prepare`;
- train from prepared data: seconds from the `train()` call to the end of the
  first training step, and peak RSS while training `--steps` steps;
- the same for training from the text files (the way before prepared data),
  side by side, at the sizes in `--text-sizes`;
- the loader alone: what its resident memory grows by while it opens the
  prepared data, plans an epoch and makes 10x `--steps` batches (the part of a
  run's memory that depends on the corpus);
- a baseline: the same training from a prepared corpus of 2,000 pairs, whose
  peak RSS is the model's and the framework's own footprint. A run's RSS over
  it also depends on which bucket shapes its steps meet (each new shape is a
  new trace of the step, and longer ones hold larger activations): the
  table prints them. With seed 0, the 3M run's 50 steps met a 72-token
  batch that the 200k run's did not (2,932 MB against 2,376); `--seed`
  (default 1, whose runs meet the same lengths) changes the draw.

The corpora are Multi30k en->de training pairs repeated with serial numbers
("17. A man in an orange hat ...") so that every sentence is new, validated on
Multi30k's own validation set (or give --src/--tgt/--val-src/--val-tgt).

    PYTHONPATH=. python benchmarks/scale.py                      # 200k and 3M, ~30 min
    PYTHONPATH=. python benchmarks/scale.py --sizes 200000 --text-sizes 200000

Targets (issue 49): prepare 3M pairs within 15 minutes and 2 GB peak RSS; a run
from prepared data reaches its first step within 60 s and stays within 1.5 GB
over the baseline, 200k and 3M within 10% of each other.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "multi30k"
# The small preset's recipe, which the corpus is prepared and trained with.
PRESET = "small"


def synthetic_corpus(pairs: int, src: Path, tgt: Path, out: Path) -> tuple[Path, Path]:
    """`pairs` lines of `src`/`tgt`, cycled, each prefixed by its serial number."""
    out.mkdir(parents=True, exist_ok=True)
    files = out / f"train{pairs}.en", out / f"train{pairs}.de"
    if all(f.is_file() for f in files):
        return files
    sides = [Path(p).read_text(encoding="utf-8").splitlines() for p in (src, tgt)]
    for lines, path in zip(sides, files, strict=True):
        with open(path, "w", encoding="utf-8") as f:
            for i in range(pairs):
                f.write(f"{i + 1}. {lines[i % len(lines)]}\n")
    return files


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


# ----------------------------------------------------------------------------- children


def child_prepare(args) -> dict:
    from keras_transformer.training import presets
    from keras_transformer.training.prepare import prepare

    config = {**presets.settings(PRESET), "src": args.src, "tgt": args.tgt}
    config.update(val_src=args.val_src, val_tgt=args.val_tgt)
    start = time.perf_counter()
    prepare(config, args.out)
    return {"seconds": time.perf_counter() - start, "peak_rss_mb": peak_rss_mb()}


def child_train(args) -> dict:
    import keras

    from keras_transformer.text import prepared
    from keras_transformer.training import presets, train

    recipe = presets.settings(PRESET)
    config = {**recipe, "epochs": 1, "steps_per_epoch": args.steps, "seed": args.seed}
    met = None
    if args.data:
        config["data"] = args.data
        # The padded lengths the steps meet: each new one is a new trace of the step.
        batches = prepared.PreparedBatches(
            prepared.PreparedData(args.data).split("train"),
            batch_size=recipe["batch_size"],
            max_tokens=recipe["max_tokens"],
            seed=args.seed,
            repeat=True,
        )
        met = sorted({int(batches[i][1].shape[1]) for i in range(args.steps)})
    else:
        config.update(src=args.src, tgt=args.tgt, val_src=args.val_src, val_tgt=args.val_tgt)
    times = {}

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.setdefault("first_step", time.perf_counter())

        def on_epoch_end(self, epoch, logs=None):
            times["steps_done"] = time.perf_counter()

    start = time.perf_counter()
    train(config, args.out, verbose=0, callbacks=[FirstStep()])
    return {
        "first_step_seconds": times["first_step"] - start,
        "steps_seconds": times["steps_done"] - times["first_step"],
        "peak_rss_mb": peak_rss_mb(),
        "padded_lengths_met": met,
    }


def child_loader(args) -> dict:
    """The loader alone: what its memory grows by while it opens the data, plans an
    epoch and makes `--steps` * 10 batches (peak RSS over the process before it)."""
    from keras_transformer.text import prepared
    from keras_transformer.training import presets

    recipe = presets.settings(PRESET)
    before = current_rss_mb()
    start = time.perf_counter()
    batches = prepared.PreparedBatches(
        prepared.PreparedData(args.data).split("train"),
        batch_size=recipe["batch_size"],
        max_tokens=recipe["max_tokens"],
    )
    opened = time.perf_counter() - start
    for position in range(min(args.steps * 10, len(batches))):
        batches[position]
    return {"open_seconds": opened, "loader_rss_mb": peak_rss_mb() - before}


def current_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def run_child(*argv: str) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--child", *argv]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200_000, 3_000_000])
    parser.add_argument(
        "--text-sizes",
        type=int,
        nargs="*",
        default=[200_000],
        help="sizes also trained from the text files (3M from text needs ~15x 200k's memory)",
    )
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1, help="the runs' seed (their shuffles)")
    parser.add_argument("--work-dir", default="/tmp/keras_transformer_scale")
    parser.add_argument("--src", default=str(CORPORA / "train.en"))
    parser.add_argument("--tgt", default=str(CORPORA / "train.de"))
    parser.add_argument("--val-src", default=str(CORPORA / "val.en"))
    parser.add_argument("--val-tgt", default=str(CORPORA / "val.de"))
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        return _child(args.child)

    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    val = ["--val-src", args.val_src, "--val-tgt", args.val_tgt]
    rows = []

    def measure(size: int) -> None:
        src, tgt = synthetic_corpus(size, Path(args.src), Path(args.tgt), work)
        files = ["--src", str(src), "--tgt", str(tgt), *val]
        prepared_dir = work / f"prepared{size}"
        if prepared_dir.exists():
            sys.exit(f"{prepared_dir} exists: remove it (or give another --work-dir).")
        row = {"pairs": size}
        row["prepare"] = run_child("prepare", *files, "--out", str(prepared_dir))
        row["loader"] = run_child("loader", "--data", str(prepared_dir), "--steps", str(args.steps))
        row["from_prepared"] = run_child(
            "train", "--data", str(prepared_dir), "--out", str(work / f"run_p{size}"),
            "--steps", str(args.steps), "--seed", str(args.seed),
        )  # fmt: skip
        if size in args.text_sizes:
            row["from_text"] = run_child(
                "train", *files, "--out", str(work / f"run_t{size}"),
                "--steps", str(args.steps), "--seed", str(args.seed),
            )  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)

    for size in [2000, *args.sizes]:
        measure(size)
    baseline = rows.pop(0)["from_prepared"]["peak_rss_mb"]
    print(f"\nbaseline (2,000 prepared pairs, {args.steps} steps): peak RSS {baseline:.0f} MB")
    header = (
        "pairs | prepare s | prepare RSS MB | loader RSS MB | first step s (prepared / text) | "
        "train RSS MB (prepared / text) | prepared RSS over baseline MB"
    )
    print(header)
    for row in rows:
        text = row.get("from_text", {})
        p = row["from_prepared"]
        print(
            f"{row['pairs']:,} | {row['prepare']['seconds']:.0f} | "
            f"{row['prepare']['peak_rss_mb']:.0f} | {row['loader']['loader_rss_mb']:.0f} | "
            f"{p['first_step_seconds']:.1f} / "
            f"{text.get('first_step_seconds', float('nan')):.1f} | {p['peak_rss_mb']:.0f} / "
            f"{text.get('peak_rss_mb', float('nan')):.0f} | {p['peak_rss_mb'] - baseline:.0f}"
        )
        print(f"  padded lengths its {args.steps} steps met: {p['padded_lengths_met']}")
        if text:
            ratio = text["first_step_seconds"] / p["first_step_seconds"]
            print(f"  first step from prepared data: {ratio:.1f}x sooner than from text")
    if len(rows) >= 2:
        over = [row["from_prepared"]["peak_rss_mb"] - baseline for row in rows]
        first = [row["from_prepared"]["first_step_seconds"] for row in rows]
        print(
            f"largest / smallest corpus: RSS over baseline {over[-1]:.0f} / {over[0]:.0f} MB, "
            f"first step {first[-1]:.1f} / {first[0]:.1f} s ({first[-1] / first[0]:.2f}x)"
        )


def _child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("prepare", "train", "loader"))
    for flag in ("--src", "--tgt", "--val-src", "--val-tgt", "--data", "--out"):
        parser.add_argument(flag)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    result = {"prepare": child_prepare, "train": child_train, "loader": child_loader}[args.mode](
        args
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
