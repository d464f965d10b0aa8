"""Fault campaign: runs killed with SIGKILL at seeded moments, then started again.

    PYTHONPATH=. nice -n 19 python benchmarks/faults.py            # 10 kills, 2 export kills
    PYTHONPATH=. python benchmarks/faults.py --kills 4 --seed 1 --sections training

Sections (each a function in `SECTIONS` that returns a `Table`; a section
for serving under load can be added beside them):

- training: `keras-transformer demo` on a tiny run (train, export the best
  checkpoint, translate with the export) is killed with SIGKILL at `--kills`
  moments drawn from `--seed`: mid-step, during validation, while best.keras,
  last.keras, the backup, history.json or a tokenizer model is written, and
  during the export. Each moment has every kind once before any repeats.
  Then the same command runs again, and the table counts, per kill:
    partial    files half-written under their temporary name at the kill
               (the kill landed mid-write);
    recorded   epochs history.json recorded done at the kill;
    resumed after  the epoch the resume went on from;
    lost       epochs history.json recorded done at the kill that the resume
               trained again (must be 0);
    corrupted  files of the run directory or the export, under their real
               names, that do not load, right after the kill and again after
               the resume (must be 0);
    failed     resumes that exit with an error, end with other epochs than
               1..N in history.json or without a file of a finished run (must
               be 0);
    left       .partial files and export staging directories left behind
               after the resume (must be 0).
- export: `keras-transformer export` of a finished run is killed mid-write
  `--export-kills` times; no version directory may be visible unless whole,
  and the next export must get the next version and leave no staging
  directory.

The kills come from inside the killed process (`--child`): the moment's hook
(a callback, or a wrapper around the writer) sends SIGKILL to its own process
at the drawn moment, so each kill lands where it was aimed, unlike a timer
outside. The process dies as from any other SIGKILL: no cleanup runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# Before TensorFlow is first imported (by the import below): keeps its start-up log quiet.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tests.test_training import TINY  # noqa: E402  (needs the repository on sys.path)

# The tests' tiny run (seconds an epoch), with about 7 training batches an epoch.
TINY_RUN = {**TINY, "demo_pairs": 240}
STEPS_PER_EPOCH = 6  # at least this many training batches, for drawing the step
# Where the killed process dies. The writes are aimed at by the file's name.
MOMENTS = ("step", "validation", "best", "last", "backup", "history", "tokenizer", "export")
WRITTEN_FILE = {
    "best": "best.keras",
    "last": "last.keras",
    "backup": ".weights.h5",
    "history": "history.json",
    "tokenizer": "spm_source.model",
}


@dataclasses.dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list]
    failures: list[str]  # what breaks a must-be-0 figure; empty when all is well


# ----------------------------------------------------------------------------- the killed process


def _kill_self(after: float = 0.0) -> None:
    """SIGKILL to this process, now or from a timer thread `after` seconds on."""
    if after <= 0:
        os.kill(os.getpid(), signal.SIGKILL)
    else:
        threading.Timer(after, os.kill, (os.getpid(), signal.SIGKILL)).start()


def _hook_callbacks(moment: dict) -> None:
    """Kills during training step `batch` or validation step `batch` of `epoch`."""
    import keras

    from keras_transformer import training

    class KillAt(keras.callbacks.Callback):
        epoch = 0

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch + 1

        def on_train_batch_begin(self, batch, logs=None):
            self._maybe("step", batch)

        def on_test_batch_begin(self, batch, logs=None):
            self._maybe("validation", batch)

        def _maybe(self, kind, batch):
            if moment["kind"] == kind and (self.epoch, batch) == (moment["epoch"], moment["batch"]):
                _kill_self(after=moment["delay"])

    make = training.make_callbacks
    training.make_callbacks = lambda *a, **k: [*make(*a, **k), KillAt()]


def _hook_writes(moment: dict) -> None:
    """Kills while the `moment["epoch"]`-th version of the aimed file is written."""
    from pathlib import Path as PathClass

    import keras

    target = WRITTEN_FILE[moment["kind"]]
    writes = {"count": 0}

    def aimed(path) -> bool:
        if target not in str(path):
            return False
        writes["count"] += 1
        return writes["count"] == moment["epoch"]

    # Keras writes checkpoints and weights: the timer fires partway through.
    for name in ("save", "save_weights"):
        original = getattr(keras.Model, name)

        def wrapper(self, filepath, *args, _original=original, **kwargs):
            if aimed(filepath):
                _kill_self(after=moment["delay"])
            return _original(self, filepath, *args, **kwargs)

        setattr(keras.Model, name, wrapper)

    # best.keras and the epoch checkpoints are copies of last.keras's file
    # (`checkpoints.copy_checkpoint`): the timer fires partway through the copy.
    copyfile = shutil.copyfile

    def timed_copy(source, destination, *args, **kwargs):
        if aimed(destination):
            _kill_self(after=moment["delay"])
        return copyfile(source, destination, *args, **kwargs)

    shutil.copyfile = timed_copy

    # Text and bytes written by the library: half is written, then the process dies.
    for name in ("write_text", "write_bytes"):
        original = getattr(PathClass, name)

        def half_then_die(self, content, *args, _original=original, **kwargs):
            if aimed(self):
                _original(self, content[: len(content) // 2], *args, **kwargs)
                _kill_self()
            return _original(self, content, *args, **kwargs)

        setattr(PathClass, name, half_then_die)


def _hook_export(moment: dict) -> None:
    """Kills `delay` seconds into writing the SavedModel."""
    import tensorflow as tf

    original = tf.saved_model.save

    def save(*args, **kwargs):
        _kill_self(after=moment["delay"])
        return original(*args, **kwargs)

    tf.saved_model.save = save


def child(moment: dict, argv: list[str]) -> int:
    """Runs the command `argv` with the hook that kills it at `moment`."""
    if moment["kind"] in ("step", "validation"):
        _hook_callbacks(moment)
    elif moment["kind"] == "export":
        _hook_export(moment)
    else:
        _hook_writes(moment)
    from keras_transformer import cli

    return cli.main(argv)


# ----------------------------------------------------------------------------- running commands


def _run(argv: list[str], log: Path, moment: dict | None = None) -> int:
    """Runs `keras-transformer argv` (killed at `moment` if given); returns its exit status."""
    if moment is None:
        command = [sys.executable, "-m", "keras_transformer_launcher", *argv]
    else:
        command = [sys.executable, __file__, "--child", json.dumps(moment), "--", *argv]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    with open(log, "w") as out:
        return subprocess.call(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)


def _epochs_started(log: Path) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^Epoch (\d+)/\d+", log.read_text(), re.M)]


# ----------------------------------------------------------------------------- checking files


def _damaged_files(run: Path, model_dir: Path | None) -> list[str]:
    """The files of the run directory and of the exports that are there but do not load."""
    import h5py

    from keras_transformer.training import backup, checkpoints, run_dir

    damaged = []

    def check(name, load):
        try:
            load()
        except Exception as error:  # any failure is a damaged file
            damaged.append(f"{name}: {type(error).__name__}: {error}"[:200])

    if (run / run_dir.CONFIG_FILE).is_file():  # written after the tokenizers
        check(run_dir.CONFIG_FILE, lambda: run_dir.read_config(run))
        check("tokenizers", lambda: run_dir.load_tokenizers(run))
    check(run_dir.HISTORY_FILE, lambda: run_dir.read_history(run))
    for path in sorted((run / run_dir.CHECKPOINT_DIR).glob("[!.]*.keras")):  # real names
        check(path.name, lambda path=path: checkpoints.load_model(path))
    for path in backup.backups(run).values():

        def read_all(path=path):
            with h5py.File(path, "r") as weights:
                weights.visititems(lambda _, x: x[()] if isinstance(x, h5py.Dataset) else None)

        check(path.name, read_all)
    for version in _versions(model_dir):
        check(f"export {version.name}", lambda version=version: _check_version(version))
    return damaged


def _missing_files(run: Path, model_dir: Path) -> list[str]:
    """What a finished `demo` must have written but did not."""
    from keras_transformer.training import run_dir

    names = [run_dir.CONFIG_FILE, run_dir.SOURCE_SPM_FILE, run_dir.TARGET_SPM_FILE]
    names += [run_dir.BEST_CHECKPOINT, run_dir.LAST_CHECKPOINT, run_dir.HISTORY_FILE]
    missing = [name for name in names if not (run / name).is_file()]
    return missing + ([] if _versions(model_dir) else [f"{model_dir}/<version>"])


def _check_version(version: Path) -> None:
    """Raises unless `version` holds a whole SavedModel (graph and variables)."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model_pb2.SavedModel().ParseFromString((version / "saved_model.pb").read_bytes())
    if not (version / "variables" / "variables.index").is_file():
        raise FileNotFoundError(f"{version}/variables/variables.index")


def _versions(model_dir: Path | None) -> list[Path]:
    if model_dir is None or not model_dir.is_dir():
        return []
    return sorted((p for p in model_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def _leftovers(run: Path, model_dir: Path | None) -> list[Path]:
    left = list(run.rglob(".partial.*"))
    if model_dir is not None and model_dir.is_dir():
        left += [p for p in model_dir.iterdir() if p.name.startswith(".")]
    return left


# ----------------------------------------------------------------------------- sections


def draw_moments(count: int, seed: int, epochs: int) -> list[dict]:
    """`count` moments: every kind once (in a seeded order) before any repeats."""
    rng = random.Random(seed)
    kinds = []
    while len(kinds) < count:
        kinds += rng.sample(MOMENTS, len(MOMENTS))
    moments = []
    for kind in kinds[:count]:
        moment = {"kind": kind, "epoch": rng.randint(1, epochs), "batch": 0, "delay": 0.0}
        if kind in ("step", "validation"):
            moment["batch"] = rng.randrange(STEPS_PER_EPOCH if kind == "step" else 1)
            moment["delay"] = round(rng.uniform(0.0, 0.05), 3)
        elif kind == "tokenizer":
            moment["epoch"] = 1  # learned once, before the first epoch
        elif kind == "export":
            moment["delay"] = round(rng.uniform(0.2, 3.0), 2)
        else:
            moment["delay"] = round(rng.uniform(0.0, 0.03), 3)
        moments.append(moment)
    return moments


def _where(moment: dict) -> str:
    if moment["kind"] in ("step", "validation"):
        return f"epoch {moment['epoch']} batch {moment['batch']} +{moment['delay'] * 1000:.0f} ms"
    if moment["kind"] == "export":
        return f"+{moment['delay']:.2f} s into the SavedModel write"
    if moment["kind"] in ("history", "tokenizer"):
        return f"write {moment['epoch']}, after half the bytes"
    return f"write {moment['epoch']} +{moment['delay'] * 1000:.0f} ms"


def training_section(args, work: Path) -> Table:
    config = work / "tiny.json"
    config.write_text(json.dumps({**TINY_RUN, "epochs": args.epochs}))
    from keras_transformer.training import run_dir

    rows, failures = [], []
    for i, moment in enumerate(draw_moments(args.kills, args.seed, args.epochs), start=1):
        run, root = work / f"run{i}", work / f"saved_models{i}"
        argv = ["demo", "--run-dir", str(run), "--export-root", str(root), "--name", "tiny"]
        argv += ["--config", str(config), "--examples", "1", "--fit-verbose", "2"]
        start = time.perf_counter()
        status = _run(argv, work / f"killed{i}.log", moment)
        killed = status == -signal.SIGKILL
        # A half-written file under its temporary name: the kill landed mid-write.
        partial = len(_leftovers(run, root / "tiny"))
        damaged = _damaged_files(run, root / "tiny")
        try:
            recorded = len(run_dir.read_history(run))
        except ValueError:
            recorded = 0
        resumed = _run(argv, work / f"resumed{i}.log")
        started = _epochs_started(work / f"resumed{i}.log")
        # Epochs run again that history.json had recorded done at the kill.
        lost = max(0, recorded - (started[0] - 1)) if started else 0
        try:
            epochs = [e["epoch"] for e in run_dir.read_history(run)]
        except ValueError:
            epochs = []
        missing = _missing_files(run, root / "tiny")
        failed = resumed != 0 or epochs != list(range(1, args.epochs + 1)) or bool(missing)
        damaged += _damaged_files(run, root / "tiny")
        left = _leftovers(run, root / "tiny")
        rows.append(
            [
                i,
                moment["kind"],
                _where(moment),
                "yes" if killed else f"no ({status})",
                partial,
                recorded,
                started[0] - 1 if started else recorded,
                lost,
                len(damaged),
                int(failed),
                len(left),
                f"{time.perf_counter() - start:.0f}",
            ]
        )
        if lost or damaged or failed or left:
            failures.append(
                f"kill {i} ({moment}): lost {lost}, damaged {damaged}, resume exit {resumed} "
                f"epochs {epochs}, missing {missing}, left {[str(p) for p in left]}; "
                f"logs in {work}"
            )
    header = ["#", "moment", "where", "killed", "partial", "recorded", "resumed after", "lost"]
    header += ["corrupted", "failed", "left", "seconds"]
    title = (
        f"Training killed: `keras-transformer demo`, {args.epochs} epochs of a tiny run, "
        f"{args.kills} SIGKILLs drawn from seed {args.seed}, each followed by the same command"
    )
    return Table(title, header, rows, failures)


def export_section(args, work: Path) -> Table:
    run = work / "export_run"
    config = work / "tiny_export.json"
    config.write_text(json.dumps({**TINY_RUN, "epochs": 1}))
    if _run(["train", "--run-dir", str(run), "--config", str(config)], work / "export_run.log"):
        return Table("Export killed", [], [], [f"training the run failed: {work}/export_run.log"])
    root = work / "export_models"
    model_dir = root / "tiny"
    argv = ["export", str(run), "--name", "tiny", "--export-root", str(root)]
    rng = random.Random(args.seed)
    rows, failures = [], []
    for i in range(1, args.export_kills + 1):
        moment = {"kind": "export", "delay": round(rng.uniform(0.2, 3.0), 2)}
        before = [int(p.name) for p in _versions(model_dir)]
        status = _run(argv, work / f"export_killed{i}.log", moment)
        # What TF Serving would see now: every version directory must be whole.
        half = []
        for version in _versions(model_dir):
            try:
                _check_version(version)
            except Exception:  # any failure: not a whole SavedModel
                half.append(version.name)
        staged = len(_leftovers(run, model_dir))
        after_kill = [int(p.name) for p in _versions(model_dir)]
        expected = max(after_kill, default=0) + 1
        again = _run(argv, work / f"export_again{i}.log")
        versions = [int(p.name) for p in _versions(model_dir)]
        left = len(_leftovers(run, model_dir))
        ok_version = again == 0 and versions == sorted({*after_kill, expected})
        rows.append(
            [
                i,
                f"+{moment['delay']:.2f} s",
                "yes" if status == -signal.SIGKILL else f"no ({status})",
                ",".join(map(str, before)) or "-",
                staged,
                len(half),
                expected if ok_version else f"{versions}",
                left,
            ]
        )
        if half or not ok_version or left:
            failures.append(f"export kill {i}: half-written {half}, versions {versions}")
    header = ["#", "killed at", "killed", "versions before", "staging after kill"]
    header += ["half-written visible", "next export", "staging left"]
    return Table(
        f"Export killed mid-write: `keras-transformer export`, {args.export_kills} SIGKILLs",
        header,
        rows,
        failures,
    )


# Section name -> function(args, work directory) -> Table, run in this order.
SECTIONS = {"training": training_section, "export": export_section}


def print_table(table: Table) -> None:
    print(f"\n{table.title}")
    widths = [
        max(len(str(x)) for x in [h, *(row[i] for row in table.rows)])
        for i, h in enumerate(table.header)
    ]
    for line in [table.header, *table.rows]:
        print("  ".join(str(x).rjust(w) for x, w in zip(line, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(json.loads(argv[1]), argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="training kills (default 10)")
    parser.add_argument("--export-kills", type=int, default=2, help="export kills (default 2)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs of the tiny run (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the moments")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"of {', '.join(SECTIONS)}")
    parser.add_argument("--work-dir", help="keep runs and logs here (default: a temporary one)")
    args = parser.parse_args(argv)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="faults-"))
    work.mkdir(parents=True, exist_ok=True)
    failures = []
    for name in args.sections.split(","):
        table = SECTIONS[name](args, work)
        print_table(table)
        failures += table.failures
    print(f"\nRuns and logs: {work}")
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
