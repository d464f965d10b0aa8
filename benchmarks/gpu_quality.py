"""The GPU quality run: a preset trained from prepared data on JAX, brought back slim.

On the GPU machine (Keras and JAX, no TensorFlow; the prepared data carried with the code):

    KERAS_BACKEND=jax PYTHONPATH=. python benchmarks/gpu_quality.py train \\
        --data data/m30k --run-dir runs/m30k_gpu --bring-back "$OUT/m30k_gpu"

trains `train({**presets.settings(PRESET), "data": DATA, "epochs": EPOCHS}, RUN_DIR)`
(a run directory holding a run resumes it: a second command on a warm machine goes on),
printing each epoch, then writes what the CPU needs to choose and score within the
device's return limits (8 files, 16 MiB each): the best and the kept epoch checkpoints
without their optimizer state (the small preset's: 9 MB each instead of 28), and the run's
small files (config, history, tokenizer) in one tar.

Back here, on TensorFlow:

    python benchmarks/gpu_quality.py restore --brought m30k_gpu --run-dir runs/m30k_gpu
    python benchmarks/quality.py multi30k --run-dir runs/m30k_gpu --eval-only

The checkpoints keep their records (epoch, validation loss), so `quality.py` chooses
between the best checkpoint and the averages of the last epochs as for a CPU run.
"""

import argparse
import json
import shutil
import tarfile
import time
from pathlib import Path

SMALL_FILES = "run_files.tar"


def train_run(args) -> None:
    from keras_transformer import train
    from keras_transformer.training import presets

    settings = {
        **presets.settings(args.preset),
        "data": args.data,
        "epochs": args.epochs,
        **json.loads(args.override),
    }
    start = time.perf_counter()
    history = train(settings, args.run_dir, verbose=2)
    seconds = time.perf_counter() - start
    epochs = len(history.history.get("loss", []))
    print(f"trained {epochs} epochs of the run in {seconds:.0f} s this process")
    if args.bring_back:
        bring_back(Path(args.run_dir), Path(args.bring_back))


def bring_back(run_dir: Path, out: Path) -> None:
    """The run's checkpoints without optimizer state, and its small files in one tar."""
    from keras_transformer.training import checkpoints
    from keras_transformer.training import run_dir as run_dir_lib

    out.mkdir(parents=True, exist_ok=True)
    kept = [run_dir / run_dir_lib.BEST_CHECKPOINT] + run_dir_lib.epoch_checkpoints(run_dir)
    for path in kept:
        model = checkpoints.load_model(path)  # uncompiled: saved without its optimizer
        checkpoints.save_checkpoint(model, out / path.name, **checkpoints.read_record(path))
    with tarfile.open(out / SMALL_FILES, "w") as archive:
        for path in sorted(run_dir.iterdir()):
            if path.is_file():
                archive.add(path, arcname=path.name)
    sizes = {path.name: path.stat().st_size for path in sorted(out.iterdir())}
    print(f"brought back to {out}: {json.dumps(sizes)}")


def restore(args) -> None:
    """A run directory from what `bring_back` wrote, for quality.py --eval-only."""
    from keras_transformer.training import run_dir as run_dir_lib

    brought, run_dir = Path(args.brought), Path(args.run_dir)
    if (run_dir / run_dir_lib.CONFIG_FILE).exists():
        raise SystemExit(f"{run_dir} holds a run already; restore into a new directory.")
    checkpoint_dir = run_dir / run_dir_lib.CHECKPOINT_DIR
    checkpoint_dir.mkdir(parents=True)
    with tarfile.open(brought / SMALL_FILES) as archive:
        archive.extractall(run_dir, filter="data")
    for path in sorted(brought.glob("*.keras")):
        shutil.copyfile(path, checkpoint_dir / path.name)
    print(f"restored {run_dir}: {sorted(p.name for p in checkpoint_dir.iterdir())}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    on_device = commands.add_parser("train", help="train (on the GPU) and bring back")
    on_device.add_argument("--data", required=True, help="a prepared data directory")
    on_device.add_argument("--run-dir", required=True)
    on_device.add_argument("--bring-back", help="where to write what comes back ($OUT/...)")
    on_device.add_argument("--preset", default="small")
    on_device.add_argument("--epochs", type=int, default=150)
    on_device.add_argument("--override", default="{}", help="more settings, as JSON")
    on_device.set_defaults(func=train_run)
    back_here = commands.add_parser("restore", help="a run directory from what came back")
    back_here.add_argument("--brought", required=True, help="the folder bring_back wrote")
    back_here.add_argument("--run-dir", required=True)
    back_here.set_defaults(func=restore)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
