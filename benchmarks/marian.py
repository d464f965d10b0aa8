"""An imported OPUS-MT-size MarianMT checkpoint: our SavedModel against CTranslate2, and the import.

One random MarianMT checkpoint of Helsinki-NLP/opus-mt-en-de's shape (6+6 layers, d_model
512, 8 heads, feed-forward 2048, swish, a shared vocabulary of 58,101: 74.4M parameters),
made by transformers' `save_pretrained`, is

- converted by CTranslate2's converter for transformers' Marian and timed in its runtime
  (`ctranslate2.Translator`, CPU, float32, `--threads` threads within an op);
- imported by the library, as a user imports a downloaded checkpoint
  (`keras-transformer import-marian CHECKPOINT --run-dir RUN`), exported
  (`keras-transformer export RUN ...`) and timed through the SavedModel's `serving_default`
  (greedy) and `beam_search` signatures, strings in and strings out, as
  benchmarks/decode.py times exports;

at batch 1 and 64, greedy and beam 4, on held-in sentences (the text the SentencePiece
models learned from), then printed side by side with the ratio ours / CTranslate2 (the
target, issue 60: at least 0.6x at batch 64). CTranslate2 takes MarianTokenizer's source
pieces and returns pieces; our export tokenizes and detokenizes in its graph.

The same work on both sides: the weights are random, with the final logits bias of `</s>`
at -100, so no row ends early and every row of both decodes exactly `--max-length` steps
(CTranslate2's `max_decoding_length`; the export's cap `--max-length` with
`--max-length-a 0 --max-length-b` the same, whose last step is [END], as transformers'
`forced_eos_token_id` ends a row at its cap). The table's header prints the tokens each
produced. Before timing, our greedy translations are compared with CTranslate2's decoded
by MarianTokenizer (the import's parity is the tests' job; here it shows that both compute
the same model).

The import is measured apart, in a child process of its own:
`keras_transformer.pretrained.import_marian(CHECKPOINT, RUN)`: its wall time and the
process's peak RSS (and the RSS with TensorFlow and the package loaded, before the call),
against the targets of under 60 s and under 3 GB; the command's wall time and peak RSS too.

The checkpoint is made by benchmarks/marian_reference.py, run by `--reference-python`: the
Python of an environment with torch and transformers (benchmarks/marian_reference_requirements.txt
pins the versions), which the library never needs.

    PYTHONPATH=. python benchmarks/marian.py --reference-python refenv/bin/python

Decoding runs on TensorFlow's default CPU kernels (oneDNN, on CPUs where TensorFlow turns
it on), as `keras-transformer translate` runs an export of this size (its variables take
over 100 MB: keras_transformer_launcher.py); `TF_ENABLE_ONEDNN_OPTS=0` before the command
times Eigen's, which the small models' exports run on. The header names the kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
from decode import _tensorflow_settings, ctranslate2_rate, sentences_per_second

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
IMPORT_SECONDS, IMPORT_GB = 60, 3  # issue 60's targets for a base-size checkpoint
TARGET_RATIO = 0.6  # at batch 64

# The child that times `import_marian`: the package and TensorFlow load first, so the
# call's own seconds and the RSS they leave are apart from the call's.
IMPORT_CHILD = """
import json, resource, sys, time
start = time.perf_counter()
from keras_transformer.pretrained import import_marian
loaded = time.perf_counter()
rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
import_marian(sys.argv[1], sys.argv[2])
done = time.perf_counter()
print(json.dumps(dict(
    load_seconds=loaded - start, import_seconds=done - loaded,
    rss_loaded_kb=rss_loaded, peak_rss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
)))
"""


def ratio_line(label: str, batch_size: int, rate: float, peer_rate: float, target: float) -> str:
    """A row of the decoding table: ours, the peer's, the ratio, and at batch 64 whether it
    meets `target`."""
    mark = ""
    if batch_size == 64:
        met = "met" if rate / peer_rate >= target else "MISSED"
        mark = f" (target {target}x: {met})"
    return (
        f"{label:<8} {batch_size:>5} {rate:>18.2f} {peer_rate:>19.2f} "
        f"{rate / peer_rate:>16.2f}x{mark}"
    )


def run_child(command: list[str], label: str) -> tuple[float, float, str]:
    """Runs `command` from the repository root with this repository's package first on
    the path: (wall seconds, its peak RSS in GB, its stdout). Exits if it fails."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]))
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)  # this child's own peak RSS
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if process.returncode:
        sys.stderr.write(stderr[-4000:])
        raise SystemExit(f"marian.py: {label} failed (exit {process.returncode})")
    return seconds, usage.ru_maxrss / 2**20, stdout  # ru_maxrss: kB on Linux


def reference(args) -> dict:
    """The checkpoint, CTranslate2's conversion and the source pieces (marian_reference.py)."""
    path = args.work_dir / "reference.json"
    if args.reuse and path.exists():
        record = json.loads(path.read_text("utf-8"))
        if len(record["sentences"]) >= args.sentences and record["max_length"] == args.max_length:
            print(f"reusing {args.work_dir / 'checkpoint'} (--reuse)")
            return record
    if not args.reference_python:
        raise SystemExit(
            "marian.py: --reference-python is needed to make the checkpoint (a Python with "
            "torch and transformers: benchmarks/marian_reference_requirements.txt)"
        )
    command = [
        args.reference_python,
        str(HERE / "marian_reference.py"),
        str(args.work_dir),
        "--sentences",
        str(args.source),
        "--count",
        str(args.sentences),
        "--max-length",
        str(args.max_length),
    ]
    _, _, stdout = run_child(command, "marian_reference.py")
    print(stdout.strip())
    return json.loads(path.read_text("utf-8"))


def measure_import(args, checkpoint: Path) -> Path:
    """`import_marian` in a child process, then the command; returns the command's run."""
    launcher = str(ROOT / "keras_transformer_launcher.py")
    run_fn, run_cli = args.work_dir / "run_function", args.work_dir / "run"
    for path in (run_fn, run_cli):
        shutil.rmtree(path, ignore_errors=True)
    _, peak_gb, stdout = run_child(
        [sys.executable, "-c", IMPORT_CHILD, str(checkpoint), str(run_fn)], "import_marian"
    )
    child = json.loads(stdout.strip().splitlines()[-1])
    seconds = child["import_seconds"]
    print(
        f"import_marian: {seconds:.1f} s (target < {IMPORT_SECONDS} s: "
        f"{'met' if seconds < IMPORT_SECONDS else 'MISSED'}), peak RSS {peak_gb:.2f} GB "
        f"(target < {IMPORT_GB} GB: {'met' if peak_gb < IMPORT_GB else 'MISSED'}); "
        f"{child['rss_loaded_kb'] / 2**20:.2f} GB with TensorFlow and the package loaded "
        f"({child['load_seconds']:.1f} s) before the call"
    )
    seconds, peak_gb, _ = run_child(
        [sys.executable, launcher, "import-marian", str(checkpoint), "--run-dir", str(run_cli)],
        "keras-transformer import-marian",
    )
    print(
        f"keras-transformer import-marian: {seconds:.1f} s in all (process start and "
        f"TensorFlow's load included), peak RSS {peak_gb:.2f} GB"
    )
    return run_cli


def export(args, run: Path) -> Path:
    """`keras-transformer export` of the imported run, every row capped at --max-length."""
    root = args.work_dir / "exports"
    shutil.rmtree(root, ignore_errors=True)
    cap = str(args.max_length)
    flags = ["--max-length", cap, "--max-length-a", "0", "--max-length-b", cap]
    flags += ["--beam-width", str(args.beam_width)]
    command = [sys.executable, str(ROOT / "keras_transformer_launcher.py"), "export", str(run)]
    command += ["--name", "marian", "--export-root", str(root), "--version", "1", *flags]
    seconds, peak_gb, stdout = run_child(command, "keras-transformer export")
    print(
        f"keras-transformer export {run} --name marian {' '.join(flags)}: {seconds:.1f} s, "
        f"peak RSS {peak_gb:.2f} GB"
    )
    return Path(stdout.strip().splitlines()[-1])


def spread(values) -> str:
    values = np.asarray(values)
    if values.min() == values.max():
        return f"{values.min()}"
    return f"{values.min()}-{values.max()} (mean {values.mean():.1f})"


def compare(args, record: dict, export_path: Path | None) -> None:
    """CTranslate2's rates, and ours beside them with the ratio when there is an export."""
    import ctranslate2

    sentences = record["sentences"][: args.sentences]
    pieces = record["source_tokens"][: args.sentences]
    peer = ctranslate2.Translator(
        str(args.work_dir / "ctranslate2"),
        device="cpu",
        compute_type="float32",
        inter_threads=1,
        intra_threads=args.threads,
    )
    # The tokens each produced: greedy on every sentence (marian_reference.py's pass),
    # beam search on the batch-1 sentences.
    few = args.batch1_sentences
    peer_lengths = {
        1: record["peer_greedy_lengths"][: len(sentences)],
        args.beam_width: [
            len(r.hypotheses[0])
            for r in peer.translate_batch(
                pieces[:few],
                beam_size=args.beam_width,
                max_decoding_length=args.max_length,
                max_input_length=0,
            )
        ],
    }
    ours = tf.saved_model.load(str(export_path)) if export_path else None
    header = (
        f"\n{len(sentences)} held-in sentences of {record['sentences_file']} "
        f"({args.batch1_sentences} at batch 1), source {spread([len(p) for p in pieces])} "
        f"tokens with </s>; CTranslate2 {ctranslate2.__version__} float32, "
        f"intra_threads={args.threads}, produced {spread(peer_lengths[1])} tokens a row greedy, "
        f"{spread(peer_lengths[args.beam_width])} beam {args.beam_width} (first {few} rows)"
    )
    if ours is not None:
        limits = {k: int(v) for k, v in ours.serving_limits().items()}
        # The signatures' searches, called as the export's methods, which also return
        # each row's length.
        lengths, texts = {"serving_default": []}, []
        for i in range(0, len(sentences), 64):
            out = ours.translate(tf.constant(sentences[i : i + 64]))
            lengths["serving_default"] += out["lengths"].numpy().tolist()
            texts += [t.decode("utf-8") for t in out["translation"].numpy()]
        out = ours.translate_beam(tf.constant(sentences[:few]), tf.constant(args.beam_width))
        lengths["beam_search"] = out["lengths"].numpy().tolist()
        same = sum(a == b for a, b in zip(texts, record["peer_greedy"]))
        header += (
            f"; our export {limits}, produced {spread(lengths['serving_default'])} tokens a "
            f"row greedy, {spread(lengths['beam_search'])} beam {args.beam_width} ([END] "
            f"included: the cap's last step); {_tensorflow_settings()}.\n"
            f"Greedy translations identical to CTranslate2's (decoded by MarianTokenizer) on "
            f"{same}/{len(sentences)} sentences"
        )
    print(header)
    print(
        f"{'search':<8} {'batch':>5} {'SavedModel sent/s':>18} {'CTranslate2 sent/s':>19}"
        f" {'ours/CTranslate2':>17}"
    )
    for beam in (1, args.beam_width):
        for batch_size in args.batch_sizes:
            count = args.batch1_sentences if batch_size == 1 else len(sentences)
            batches = [pieces[i : i + batch_size] for i in range(0, count, batch_size)]
            peer_rate = ctranslate2_rate(peer, batches, beam, args.max_length, args.repeats)
            label = "greedy" if beam == 1 else f"beam{beam}"
            if ours is None:
                print(f"{label:<8} {batch_size:>5} {'not measured':>18} {peer_rate:>19.2f}")
                continue
            search = "serving_default" if beam == 1 else "beam_search"
            rate = sentences_per_second(
                ours.signatures[search], sentences[:count], batch_size, args.repeats
            )
            print(ratio_line(label, batch_size, rate, peer_rate, TARGET_RATIO), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--reference-python", help="a Python with torch, transformers and ctranslate2"
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "keras_transformer_marian",
        help="where the checkpoint, its conversion, the run and the export go "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--source",
        type=Path,
        default=ROOT.parent / "shared" / "corpora" / "multi30k" / "train.en",
        help="held-in English sentences, one a line: the SentencePiece models' text",
    )
    parser.add_argument("--reuse", action="store_true", help="keep a checkpoint made before")
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--batch1-sentences", type=int, default=8, help="fewer at batch 1")
    parser.add_argument("--max-length", type=int, default=64, help="tokens decoded a row")
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--repeats", type=int, default=1, help="timed passes; best kept")
    parser.add_argument("--threads", type=int, default=2, help="CTranslate2's intra_threads")
    parser.add_argument(
        "--peer-only",
        action="store_true",
        help="time CTranslate2 alone (no import, no export)",
    )
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)

    record = reference(args)
    v = record["versions"]
    print(
        f"checkpoint: {record['parameters']:,} parameters, made with transformers "
        f"{v['transformers']} and torch {v['torch']}; CTranslate2 {v['ctranslate2']}'s "
        f"conversion: {record['conversion_seconds']:.1f} s, greedy output equal to "
        f"transformers' generate on {record['checked_against_transformers']} sentences"
    )
    export_path = None
    if not args.peer_only:
        run = measure_import(args, args.work_dir / "checkpoint")
        export_path = export(args, run)
    compare(args, record, export_path)


if __name__ == "__main__":
    main()
