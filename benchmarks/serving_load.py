"""Serving under load: an exported SavedModel called from many threads at once.

The export is loaded once in a fresh process that imports only tensorflow and
tensorflow_text (as the TF Serving model server runs it: nothing of
keras_transformer), then called through its `serving_default` signature from
`threads` threads for `seconds`, each thread sending one kind of request:

- thread 0: "huge" requests of 10,000 rows;
- thread 1: "large" requests of 512 rows, one of them 3,000 words long;
- the others: "small" requests of 1-16 rows (now and then none).

Rows are normal sentences mixed with hostile ones: empty, whitespace only, a
3,000-word row, undecodable bytes, out-of-vocabulary characters, a 1 MB
string, control characters, right-to-left text, combining characters. Every
answer is checked: one translation and one finite score <= 0 per row, the
3,000-word and 1 MB rows reported cut (`source_truncated`) and no normal row, and a
normal row must read as it does when translated alone (computed before the
load, one row per call); an exception is an error. A request still running at
the deadline is waited for.

Figures: requests, rows, errors, wrong answers, mismatches, latency p50/p99 per
kind (and of a one-row request before the load, for scale), resident memory
(RSS) after loading, after the first calls, at its peak under the load and at
the end, and the most bytes of strings one request sent (the 10,000-row requests carry
about 290 1 MB rows: the serving process holds them as its input through the call, so
they are part of the growth). `long_row_cost` measures what one 3,000-word row
adds to the peak memory of a batch, each figure in its own fresh process.

The figures of the README's reliability section (the demo export: `keras-transformer
demo` trains it in a few CPU minutes and exports it to saved_models/demo/):

    keras-transformer demo
    PYTHONPATH=. python benchmarks/serving_load.py saved_models/demo --threads 8 --seconds 60

A quick check that it runs (about a minute on 2 cores): `--seconds 15 --long-row 16`.
`--kernels both` runs the load twice, on TensorFlow's Eigen kernels and on its oneDNN ones
(`TF_ENABLE_ONEDNN_OPTS` 0 and 1 in the serving process), and prints issue 79's serving
bounds for each: the growth under load, what the loaded export adds to TensorFlow and
tensorflow-text, and oneDNN's small requests against Eigen's:

    PYTHONPATH=. python benchmarks/serving_load.py saved_models/demo --kernels both \
        --inter-op-threads 0 --long-row
`--intra-op-threads 1` serves with one thread within an op, as the README's model server
commands do (`--tensorflow_intra_op_parallelism=1`); the default leaves TensorFlow's.

This module imports only the standard library at the top, so that other
benchmarks (benchmarks/faults.py) can import `run_load` and `long_row_cost`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

# Normal rows: numbers as words (the built-in demo corpus' kind) and plain sentences.
DEFAULT_SENTENCES = [
    "seven thousand, eight hundred and ninety",
    "four",
    "seventy-three thousand, six hundred and ninety-one",
    "five thousand, nine hundred and sixty-nine",
    "three hundred and twelve",
    "forty-two",
    "one million, two hundred thousand and five",
    "eighteen",
    "six hundred",
    "ninety-nine thousand, nine hundred and ninety-nine",
    "two thousand and one",
    "eleven thousand, one hundred and eleven",
    "The cat sat on the mat.",
    "This is a problem we have to solve.",
    "Where is the station?",
    "I would like two coffees, please.",
]

LONG_ROW_WORDS = 3000
# The serving process' inter-op thread pool, as the README's model server flag:
# a thread per request served at once. `--inter-op-threads 0` runs TensorFlow's
# default (about one a core), where a long request keeps small ones moving only
# by handing its thread back between sub-batches (`sub_batches.yield_thread`).
DEFAULT_INTER_OP_THREADS = 16

# `--kernels`: TF_ENABLE_ONEDNN_OPTS in the serving process ("default" leaves it alone).
KERNEL_SETTINGS = {"default": None, "eigen": "0", "onednn": "1"}
# Issue 79's serving bounds: RSS growth over the loaded export under the load, with
# TensorFlow's default pools (`--inter-op-threads 0`) and with 16 inter-op threads; what
# the loaded export adds to TensorFlow and tensorflow-text alone.
GROWTH_BOUND_MB = {0: 512, 16: 1024}
LOADED_BOUND_MB = 0.2 * 1024


def hostile_rows() -> dict[str, bytes]:
    """The hostile rows, by name, as the bytes a client sends."""
    return {
        "empty": b"",
        "whitespace": b"   \t \n ",
        "3000 words": " ".join(["seven"] * LONG_ROW_WORDS).encode(),
        "undecodable": b"one \xff\xfe two \xc3",
        "out of vocabulary": "três ☃ nine 🎂 𝔘𝔫𝔦𝔠𝔬𝔡𝔢".encode(),
        "1 MB": (b"one two three " * 80_000)[: 1 << 20],
        "control": b"one\x00two\x07\x1b[31mthree\x7f\x08\x0c\r\x85four",
        "right to left": "مرحبا بالعالم שלום \u202eevil\u202c forty-two".encode(),
        # Accents stacked on one letter, and "Zalgo" text.
        "combining": "e\u0301\u0301\u0301 n\u0303 Z\u0334\u0321a\u0338l\u0337g\u0336o".encode(),
    }


# -------------------------------------------------------------- the parent's side


def _run_worker(task: dict, timeout: float) -> dict:
    """Runs `task` in a fresh interpreter (see `_worker`) and returns its JSON result,
    with TF_ENABLE_ONEDNN_OPTS set as `task["kernels"]` says (`KERNEL_SETTINGS`)."""
    env = dict(os.environ)
    setting = KERNEL_SETTINGS[task.get("kernels", "default")]
    if setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = setting
    run = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker"],
        input=json.dumps(task),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if run.returncode != 0:
        raise RuntimeError(f"The serving worker failed ({run.returncode}):\n{run.stderr[-4000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def run_load(
    export_dir: str | os.PathLike,
    threads: int = 8,
    seconds: float = 60.0,
    huge_rows: int = 10_000,
    large_rows: int = 512,
    small_rows: tuple[int, int] = (1, 16),
    hostile_share: float = 0.25,
    sentences: list[str] | None = None,
    signature: str = "serving_default",
    seed: int = 0,
    inter_op_threads: int = DEFAULT_INTER_OP_THREADS,
    intra_op_threads: int = 0,
    kernels: str = "default",
) -> dict:
    """Loads the SavedModel at `export_dir` in a fresh process and serves a mixed load.

    Args:
        export_dir: a SavedModel (version directory) or a TF Serving model
            directory (its highest version is used).
        threads: calling threads. Thread 0 sends `huge_rows`-row requests,
            thread 1 `large_rows`-row ones (0 turns either off and gives its
            thread to small requests), the rest small requests.
        seconds: how long new requests are started; running ones are waited for.
        small_rows: fewest and most rows of a small request; a small request
            has no rows one time in 50.
        hostile_share: the share of rows drawn from `hostile_rows()`.
        sentences: the normal rows. Defaults to `DEFAULT_SENTENCES`.
        signature: the signature called.
        seed: seeds each thread's choice of rows.
        inter_op_threads: size of TensorFlow's inter-op thread pool in the
            serving process (TF Serving's --tensorflow_inter_op_parallelism).
            Defaults to 16 (see `DEFAULT_INTER_OP_THREADS`); 0 leaves
            TensorFlow's default.
        intra_op_threads: threads within one op in the serving process (TF
            Serving's --tensorflow_intra_op_parallelism); 0 (the default) leaves
            TensorFlow's, one a core.
        kernels: "eigen" or "onednn" sets TF_ENABLE_ONEDNN_OPTS in the serving
            process; "default" leaves the environment's.

    Returns:
        A dict of figures: "requests", "rows", "errors", "wrong" (answers
        without one finite score <= 0 per row, or with a wrong
        `source_truncated`), "mismatched" (normal rows
        read differently than alone), "first_errors", "kinds" (per kind:
        requests, rows, errors, p50, p99, max seconds), "unloaded_p50" (a
        one-row request before the load), "rss_mb" (start: TensorFlow and
        tensorflow-text imported; loaded, warm, peak, end), "wall_seconds", and
        the arguments.
    """
    _check_kernels(kernels)
    if threads < 1 or seconds <= 0:
        raise ValueError(f"threads and seconds must be positive. Received: {threads}, {seconds}")
    task = {
        "mode": "load",
        "export_dir": str(_saved_model_dir(export_dir)),
        "threads": int(threads),
        "seconds": float(seconds),
        "huge_rows": int(huge_rows),
        "large_rows": int(large_rows),
        "small_rows": [int(small_rows[0]), int(small_rows[1])],
        "hostile_share": float(hostile_share),
        "sentences": list(sentences or DEFAULT_SENTENCES),
        "signature": signature,
        "seed": int(seed),
        "inter_op_threads": int(inter_op_threads),
        "intra_op_threads": int(intra_op_threads),
        "kernels": kernels,
    }
    # Generous: the loading, the reference translations and the last requests.
    return _run_worker(task, timeout=seconds * 10 + 1800)


def long_row_cost(
    export_dir: str | os.PathLike,
    rows: int = 16,
    words: int = LONG_ROW_WORDS,
    sentences: list[str] | None = None,
    signature: str = "serving_default",
    inter_op_threads: int = DEFAULT_INTER_OP_THREADS,
    intra_op_threads: int = 0,
    kernels: str = "default",
) -> dict:
    """What one `words`-word row adds to the peak memory of a `rows`-row request.

    Two fresh processes each load the export, warm it up with a 2-row call and
    measure the peak RSS of one call over its RSS before: `rows` normal rows,
    then `rows - 1` normal rows and the long one. The difference, divided by
    the `rows - 1` other rows the long one could pad, is the cost per extra row.
    The thread and kernel settings are `run_load`'s.

    Returns:
        dict with rows, without_mb, with_mb, extra_mb, per_row_mb.
    """
    _check_kernels(kernels)
    if rows < 2:
        raise ValueError(f"rows must be at least 2. Received: rows={rows}")
    pool = list(sentences or DEFAULT_SENTENCES)
    normal = [pool[i % len(pool)] for i in range(rows)]
    long_row = " ".join(["seven"] * words)
    peaks = {}
    for name, texts in (("without", normal), ("with", normal[:-1] + [long_row])):
        task = {
            "mode": "peak",
            "export_dir": str(_saved_model_dir(export_dir)),
            "texts": texts,
            "signature": signature,
            "inter_op_threads": int(inter_op_threads),
            "intra_op_threads": int(intra_op_threads),
            "kernels": kernels,
        }
        peaks[name] = _run_worker(task, timeout=1800)["peak_mb"]
    extra = peaks["with"] - peaks["without"]
    return {
        "rows": rows,
        "without_mb": peaks["without"],
        "with_mb": peaks["with"],
        "extra_mb": extra,
        "per_row_mb": extra / (rows - 1),
    }


def _check_kernels(kernels: str) -> None:
    if kernels not in KERNEL_SETTINGS:
        raise ValueError(f"kernels must be one of {sorted(KERNEL_SETTINGS)}. Received: {kernels!r}")


def _saved_model_dir(path: str | os.PathLike) -> Path:
    """`path` if it is a SavedModel, else its highest integer version directory."""
    # Here, in the calling process, the library may be imported; the worker must not.
    from keras_transformer.inference.export import latest_version_dir

    return latest_version_dir(path)


# -------------------------------------------------------------- the worker's side


def _rss_mb() -> float:
    return _proc_status_kb("VmRSS") / 1024


def _proc_status_kb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return float(line.split()[1])
    return math.nan


def _reset_peak() -> None:
    """Resets the kernel's peak RSS (VmHWM) of this process, where Linux allows it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # then the peak also covers the loading


class _PeakSampler(threading.Thread):
    """The largest RSS seen every 20 ms (beside VmHWM, should the reset be refused)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = _rss_mb()
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.wait(0.02):
            self.peak = max(self.peak, _rss_mb())

    def stop(self) -> float:
        self.stopped.set()
        self.join()
        return max(self.peak, _proc_status_kb("VmHWM") / 1024)


def _percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def _worker(task: dict) -> dict:
    # As the model server: the export must run without the library.
    sys.modules["keras_transformer"] = None
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    if task.get("inter_op_threads"):
        tf.config.threading.set_inter_op_parallelism_threads(task["inter_op_threads"])
    if task.get("intra_op_threads"):
        tf.config.threading.set_intra_op_parallelism_threads(task["intra_op_threads"])
    rss_start = _rss_mb()
    serve = tf.saved_model.load(task["export_dir"]).signatures[task["signature"]]
    rss_loaded = _rss_mb()

    def call(texts: list[bytes]) -> dict:
        out = serve(text=tf.constant(texts, tf.string, shape=[len(texts)]))
        return {key: value.numpy() for key, value in out.items()}

    if task["mode"] == "peak":
        call([b"four", b"forty-two"])  # the first call builds the graph
        texts = [t.encode() for t in task["texts"]]
        before = _rss_mb()
        _reset_peak()
        sampler = _PeakSampler()
        sampler.start()
        call(texts)
        return {"peak_mb": sampler.stop() - before}
    return _serve_load(task, call, rss_start, rss_loaded)


def _serve_load(task: dict, call, rss_start: float, rss_loaded: float) -> dict:
    sentences = [s.encode() for s in task["sentences"]]
    hostile_by_name = hostile_rows()
    hostile = list(hostile_by_name.values())
    # Each normal row alone: what it must read like inside any request.
    reference = {s: call([s])["translation"][0] for s in sentences}
    # The same one-row calls again, timed: what a small request costs with no load.
    unloaded = []
    for sentence in sentences:
        start = time.perf_counter()
        call([sentence])
        unloaded.append(time.perf_counter() - start)
    call(hostile)
    rss_warm = _rss_mb()

    roles = ["small"] * task["threads"]
    if task["huge_rows"] and task["threads"] > 1:
        roles[0] = "huge"
    if task["large_rows"] and task["threads"] > 2:
        roles[1] = "large"
    low, high = task["small_rows"]
    lock = threading.Lock()
    # kind, rows, seconds, ok, start, bytes of strings sent
    records: list[tuple[str, int, float, bool, float, int]] = []
    counts = {"wrong": 0, "mismatched": 0}
    first_errors: list[str] = []

    def request(kind: str, rng: random.Random) -> list[bytes]:
        if kind == "small":
            size = 0 if rng.random() < 0.02 else rng.randint(low, high)
        else:
            size = task["huge_rows"] if kind == "huge" else task["large_rows"]
        rows = [
            rng.choice(hostile) if rng.random() < task["hostile_share"] else rng.choice(sentences)
            for _ in range(size)
        ]
        if kind == "large":
            rows[rng.randrange(size)] = hostile_by_name["3000 words"]
        return rows

    # Rows whose source must be reported cut, and (the normal ones) must not.
    overlong = {hostile_by_name["3000 words"], hostile_by_name["1 MB"]}

    def check(rows: list[bytes], out: dict) -> tuple[bool, int]:
        translations, scores = out["translation"], out["score"]
        ok = len(translations) == len(scores) == len(rows)
        ok = ok and all(math.isfinite(s) and s <= 0 for s in scores)
        if "source_truncated" in out:  # exports made before it have no such output
            cut = out["source_truncated"]
            ok = ok and len(cut) == len(rows)
            ok = ok and all(c for row, c in zip(rows, cut) if row in overlong)
            ok = ok and not any(c for row, c in zip(rows, cut) if row in reference)
        if not ok:
            return False, 0
        mismatched = sum(
            1 for row, t in zip(rows, translations) if row in reference and t != reference[row]
        )
        return True, mismatched

    started = time.perf_counter()
    deadline = started + task["seconds"]

    def serve_thread(index: int) -> None:
        rng = random.Random(task["seed"] * 1000 + index)
        kind = roles[index]
        while time.perf_counter() < deadline:
            rows = request(kind, rng)
            sent = sum(len(row) for row in rows)
            start = time.perf_counter()
            try:
                out = call(rows)
                elapsed = time.perf_counter() - start
                ok, mismatched = check(rows, out)
                with lock:
                    records.append((kind, len(rows), elapsed, True, start - started, sent))
                    counts["wrong"] += not ok
                    counts["mismatched"] += mismatched
            except Exception as error:  # a failed request is a figure, not the end of the run
                elapsed = time.perf_counter() - start
                with lock:
                    records.append((kind, len(rows), elapsed, False, start - started, sent))
                    if len(first_errors) < 5:
                        first_errors.append(f"{kind}: {type(error).__name__}: {error}"[:500])

    _reset_peak()
    sampler = _PeakSampler()
    sampler.start()
    workers = [threading.Thread(target=serve_thread, args=(i,)) for i in range(task["threads"])]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - started
    peak = sampler.stop()

    kinds = {}
    for kind in ("small", "large", "huge"):
        mine = [r for r in records if r[0] == kind]
        if not mine:
            continue
        latencies = [r[2] for r in mine]
        kinds[kind] = {
            "requests": len(mine),
            "rows": sum(r[1] for r in mine),
            "errors": sum(not r[3] for r in mine),
            "p50": _percentile(latencies, 50),
            "p99": _percentile(latencies, 99),
            "max": max(latencies),
        }
    figures = {key: value for key, value in task.items() if key not in ("mode", "sentences")}
    figures.update(
        requests=len(records),
        rows=sum(r[1] for r in records),
        errors=sum(not r[3] for r in records),
        wrong=counts["wrong"],
        mismatched=counts["mismatched"],
        first_errors=first_errors,
        kinds=kinds,
        # Every request: kind, rows, seconds from the start, seconds taken, answered.
        log=[(r[0], r[1], round(r[4], 3), round(r[2], 3), r[3]) for r in records],
        wall_seconds=wall,
        unloaded_p50=_percentile(unloaded, 50),
        # The serving process holds a request's strings as its input tensor for the
        # whole call, so the largest request's are part of the growth under load.
        largest_request_mb=max((r[5] for r in records), default=0) / 2**20,
        rss_mb={
            "start": rss_start,
            "loaded": rss_loaded,
            "warm": rss_warm,
            "peak": peak,
            "end": _rss_mb(),
        },
    )
    return figures


# -------------------------------------------------------------- the table


def format_table(figures: dict, cost: list[dict] | None = None) -> str:
    """The load figures (and long-row costs) as a text table, with the bounds checked."""
    lines = [
        f"{figures['export_dir']}: {figures['signature']}, {figures['threads']} threads, "
        f"{figures['seconds']:.0f} s of new requests ({figures['wall_seconds']:.0f} s wall), "
        f"inter-op threads {figures['inter_op_threads'] or 'TensorFlow default'}, "
        f"intra-op threads {figures.get('intra_op_threads') or 'TensorFlow default'}, "
        f"kernels {figures.get('kernels', 'default')}",
        "",
        f"{'kind':<7}{'rows/request':>14}{'requests':>10}{'rows':>9}{'errors':>8}"
        f"{'p50 s':>9}{'p99 s':>9}{'max s':>9}",
    ]
    sizes = {
        "small": "{}-{}".format(*figures["small_rows"]),
        "large": str(figures["large_rows"]),
        "huge": str(figures["huge_rows"]),
    }
    for kind, k in figures["kinds"].items():
        lines.append(
            f"{kind:<7}{sizes[kind]:>14}{k['requests']:>10}{k['rows']:>9}{k['errors']:>8}"
            f"{k['p50']:>9.3f}{k['p99']:>9.3f}{k['max']:>9.3f}"
        )
    lines.append(
        f"{'all':<7}{'':>14}{figures['requests']:>10}{figures['rows']:>9}{figures['errors']:>8}"
    )
    rss = figures["rss_mb"]
    lines += [
        "",
        f"one-row request with no load: p50 {figures['unloaded_p50']:.3f} s",
        f"wrong answers (row count, score, source_truncated): {figures['wrong']}; normal rows "
        f"read differently than alone: {figures['mismatched']}",
        f"RSS MB: TensorFlow and tensorflow-text {rss['start']:.0f}, loaded {rss['loaded']:.0f} "
        f"(+{rss['loaded'] - rss['start']:.0f}), after the first calls {rss['warm']:.0f}, "
        f"peak {rss['peak']:.0f} (+{rss['peak'] - rss['loaded']:.0f} over loaded), "
        f"end {rss['end']:.0f}",
    ]
    if "largest_request_mb" in figures:  # figures recorded before it have none
        lines.append(
            f"the largest request's strings: {figures['largest_request_mb']:.0f} MB "
            "(the serving process holds them through its call: part of the growth)"
        )
    for error in figures["first_errors"]:
        lines.append(f"error: {error}")
    for c in cost or []:
        lines.append(
            f"one {LONG_ROW_WORDS}-word row in {c['rows']} rows: +{c['extra_mb']:.1f} MB peak "
            f"({c['without_mb']:.1f} -> {c['with_mb']:.1f}), {c['per_row_mb']:.2f} MB per extra row"
        )
    lines += ["", "bounds (the serving issue):"]
    small = figures["kinds"].get("small")
    checks = [
        ("0 errors", figures["errors"] == 0),
        ("one translation, a finite score and the right truncation per row", figures["wrong"] == 0),
        ("normal rows read as translated alone", figures["mismatched"] == 0),
        ("peak RSS <= loaded + 1.5 GB", rss["peak"] <= rss["loaded"] + 1536),
    ]
    if small:
        ratio = small["p99"] / small["p50"] if small["p50"] > 0 else math.inf
        checks.append((f"small p99 <= 30x small p50 (reached {ratio:.1f}x)", ratio <= 30))
    for c in cost or []:
        checks.append((f"long row <= 4 MB per extra row ({c['rows']} rows)", c["per_row_mb"] <= 4))
    lines += [f"  {'ok  ' if ok else 'FAIL'} {name}" for name, ok in checks]
    return "\n".join(lines)


def kernel_bounds(by_kernels: dict[str, dict]) -> str:
    """Issue 79's serving bounds for each kernel set's figures (`run_load`'s, keyed
    "eigen" and "onednn"), met or missed."""
    lines = ["issue 79's serving bounds, " + " | ".join(by_kernels) + ":"]

    def row(name: str, values: list[str], ok: bool | None) -> None:
        mark = "    " if ok is None else ("ok  " if ok else "MISS")
        lines.append(f"  {mark} {name}: {' | '.join(values)}")

    figures = list(by_kernels.values())
    threads = figures[0]["inter_op_threads"]
    growth = [f["rss_mb"]["peak"] - f["rss_mb"]["loaded"] for f in figures]
    bound = GROWTH_BOUND_MB.get(threads)
    row(
        f"growth under load, MB (<= {bound})"
        if bound
        else "growth under load, MB (no bound for these inter-op threads)",
        [f"+{g:.0f}" for g in growth],
        None if bound is None else all(g <= bound for g in growth),
    )
    if all("largest_request_mb" in f for f in figures):
        row(
            "of that growth, the largest request's own strings, MB",
            [f"{f['largest_request_mb']:.0f}" for f in figures],
            None,
        )
    loaded = [f["rss_mb"]["loaded"] - f["rss_mb"]["start"] for f in figures]
    row(
        f"the loaded export over TensorFlow and tensorflow-text, MB (<= {LOADED_BOUND_MB:.1f})",
        [f"+{m:.0f}" for m in loaded],
        all(m <= LOADED_BOUND_MB for m in loaded),
    )
    small = {k: f["kinds"].get("small", {}).get("requests", 0) for k, f in by_kernels.items()}
    if "eigen" in small and "onednn" in small and small["eigen"]:
        ratio = small["onednn"] / small["eigen"]
        row(
            f"small requests answered (oneDNN >= Eigen: {ratio:.2f}x)",
            [str(n) for n in small.values()],
            ratio >= 1.0,
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export_dir", nargs="?", help="SavedModel or TF Serving model directory")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--huge-rows", type=int, default=10_000, help="0: no huge requests")
    parser.add_argument("--large-rows", type=int, default=512, help="0: no large requests")
    parser.add_argument("--small-rows", type=int, nargs=2, default=(1, 16), metavar=("MIN", "MAX"))
    parser.add_argument("--hostile-share", type=float, default=0.25)
    parser.add_argument("--sentences", help="normal rows, one a line (default: built in)")
    parser.add_argument("--signature", default="serving_default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--inter-op-threads",
        type=int,
        default=DEFAULT_INTER_OP_THREADS,
        help="TensorFlow's inter-op thread pool in the serving process, as TF Serving's "
        "--tensorflow_inter_op_parallelism (default: %(default)s; 0: TensorFlow's default)",
    )
    parser.add_argument(
        "--intra-op-threads",
        type=int,
        default=0,
        help="threads within one op in the serving process, as TF Serving's "
        "--tensorflow_intra_op_parallelism (default: 0, TensorFlow's default)",
    )
    parser.add_argument(
        "--long-row",
        type=int,
        nargs="*",
        default=[16, 512],
        metavar="ROWS",
        help="also measure one 3,000-word row's memory in requests of ROWS rows "
        "(default: 16 512; none: skip)",
    )
    parser.add_argument(
        "--kernels",
        choices=[*KERNEL_SETTINGS, "both"],
        default="default",
        help="TensorFlow's CPU kernels in the serving process: eigen or onednn "
        "(TF_ENABLE_ONEDNN_OPTS 0 or 1), both (one load each, and issue 79's bounds), or "
        "default (the environment's)",
    )
    parser.add_argument(
        "--json-out",
        help="also write the figures to this JSON file (with --kernels both, keyed by kernel set)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(json.load(sys.stdin))))
        return 0
    if not args.export_dir:
        parser.error("the export_dir argument is required")
    sentences = None
    if args.sentences:
        sentences = [s for s in Path(args.sentences).read_text("utf-8").splitlines() if s.strip()]
    kernel_sets = ["eigen", "onednn"] if args.kernels == "both" else [args.kernels]
    results = {}
    for kernels in kernel_sets:
        figures = run_load(
            args.export_dir,
            threads=args.threads,
            seconds=args.seconds,
            huge_rows=args.huge_rows,
            large_rows=args.large_rows,
            small_rows=tuple(args.small_rows),
            hostile_share=args.hostile_share,
            sentences=sentences,
            signature=args.signature,
            seed=args.seed,
            inter_op_threads=args.inter_op_threads,
            intra_op_threads=args.intra_op_threads,
            kernels=kernels,
        )
        cost = [
            long_row_cost(
                args.export_dir,
                rows,
                sentences=sentences,
                signature=args.signature,
                inter_op_threads=args.inter_op_threads,
                intra_op_threads=args.intra_op_threads,
                kernels=kernels,
            )
            for rows in args.long_row
        ]
        print(format_table(figures, cost) + "\n", flush=True)
        results[kernels] = {"load": figures, "long_row": cost}
    if len(results) > 1:
        print(kernel_bounds({k: r["load"] for k, r in results.items()}))
    if args.json_out:
        only = results[kernel_sets[0]] if len(results) == 1 else results
        Path(args.json_out).write_text(json.dumps(only, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
