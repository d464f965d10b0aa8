"""Every Keras backend: the same weights give the same logits, and `.keras` files cross over.

Keras fixes its backend at import, so each backend runs `tests/backend_probe.py`
in a process of its own. TensorFlow and JAX run everywhere the tests do (JAX is
in the dev extra); PyTorch's wheel is large, and its runs are skipped where it
is not installed, saying so.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "tests" / "backend_probe.py"
ATOL = 1e-5  # float32


def _available(module):
    return importlib.util.find_spec(module) is not None


BACKENDS = [
    pytest.param(
        backend,
        marks=pytest.mark.skipif(
            not _available(backend),
            reason=f"{backend} is not installed here (pip install .[{backend}])",
        ),
    )
    for backend in ("tensorflow", "jax", "torch")
]


def python_path():
    """The repository first, then the PYTHONPATH given (where a backend may be installed)."""
    return os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


def run_probe(backend, *modes_and_directories):
    """Runs the probe on `backend` for each (mode, directory) pair given, in one process;
    returns the outputs it wrote in each directory."""
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": python_path()}
    result = subprocess.run(
        [sys.executable, str(PROBE), *map(str, modes_and_directories)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    directories = modes_and_directories[1::2]
    return [dict(np.load(Path(d) / f"outputs_{backend}.npz")) for d in directories]


def copy_models(directory, tmp_path_factory):
    """A new directory holding `directory`'s .keras files, for another backend to load."""
    work = tmp_path_factory.mktemp("models")
    for model_file in Path(directory).glob("*.keras"):
        (work / model_file.name).write_bytes(model_file.read_bytes())
    return work


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """backend -> (directory of the models it made and saved, its outputs), made on demand.
    A backend other than TensorFlow also loads TensorFlow's models in the same process
    (one start of its process, not two): `made.loaded[backend]` holds their outputs."""
    cache = {}

    def make(backend):
        if backend not in cache:
            directory = tmp_path_factory.mktemp(f"made_on_{backend}")
            if backend == "tensorflow":
                (outputs,) = run_probe(backend, "make", directory)
            else:
                theirs = copy_models(make("tensorflow")[0], tmp_path_factory)
                outputs, make.loaded[backend] = run_probe(
                    backend, "make", directory, "load", theirs
                )
            cache[backend] = directory, outputs
        return cache[backend]

    make.loaded = {}
    return make


def model_names(outputs):
    return sorted(key.split("/")[0] for key in outputs if key.endswith("/logits"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_invariance_causality_and_keras_masks_on_each_backend(backend, made):
    _, outputs = made(backend)
    for name in model_names(outputs):
        logits = outputs[f"{name}/logits"]
        assert np.isfinite(logits).all()
        # More padding after either input leaves the real positions' logits alone.
        more = outputs[f"{name}/logits_more_padding"][:, : logits.shape[1]]
        np.testing.assert_allclose(more, logits, atol=ATOL, err_msg=name)
        # Changing the target at position 2 leaves positions 0 and 1 alone, and moves 2.
        changed = outputs[f"{name}/logits_later_token_changed"]
        np.testing.assert_allclose(changed[:, :2], logits[:, :2], atol=ATOL, err_msg=name)
        assert np.abs(changed[0, 2] - logits[0, 2]).max() > 1e-3
        # Called the tutorial's way (Keras masks), the layers mask as with explicit masks.
        for part in ("block", "decoder"):
            keras_mask = outputs[f"{name}/{part}_keras_mask"]
            explicit = outputs[f"{name}/{part}_explicit_mask"]
            np.testing.assert_allclose(keras_mask, explicit, atol=ATOL, err_msg=f"{name} {part}")
    # The tutorial's attention layer (keras_transformer.tutorial), its Keras mask as explicit.
    np.testing.assert_allclose(
        outputs["tutorial/attention_keras_mask"],
        outputs["tutorial/attention_explicit_mask"],
        atol=ATOL,
    )
    # The probe's source rows are padded: an unmasked run would differ.
    assert outputs["loss"] > 0 and 0 <= outputs["accuracy"] <= 1


def assert_same_outputs(made, loaded, what):
    """The loaded models' outputs equal the made ones' (the made add this backend's own)."""
    assert set(loaded) <= set(made) and any("/logits" in key for key in loaded)
    for key in loaded:
        np.testing.assert_allclose(made[key], loaded[key], atol=ATOL, err_msg=f"{key} ({what})")


@pytest.mark.parametrize(
    "maker,loader",
    [
        ("tensorflow", "jax"),
        ("jax", "tensorflow"),
        ("tensorflow", "torch"),
        ("torch", "tensorflow"),
    ],
)
def test_a_keras_file_saved_on_one_backend_loads_on_another_with_equal_outputs(
    maker, loader, made, tmp_path_factory
):
    for backend in (maker, loader):
        if not _available(backend):
            pytest.skip(f"{backend} is not installed here (pip install .[{backend}])")
    directory, made_outputs = made(maker)
    if maker == "tensorflow":  # loaded where the other backend made its own models
        made(loader)
        loaded_outputs = made.loaded[loader]
    else:
        (loaded_outputs,) = run_probe(loader, "load", copy_models(directory, tmp_path_factory))
    assert_same_outputs(made_outputs, loaded_outputs, f"saved on {maker}, loaded on {loader}")


# ------------------------ train on JAX or PyTorch, bring the run back to TensorFlow

# Runs on the JAX or PyTorch backend in a process where `import tensorflow` fails: the
# console script's entry point trains from prepared data and refuses in one line what
# needs TensorFlow; then the Python functions are called.
TRAIN_WITHOUT_TENSORFLOW = r"""
import json, sys
from pathlib import Path
sys.modules["tensorflow"] = None  # any import of it fails
import keras
import keras_transformer
import keras_transformer_launcher
from keras_transformer.training import run_dir as run_dirs

commands, config, run_dir, other_run_dir, brought = json.loads(sys.argv[1])
for argv in commands:
    sys.argv = ["keras-transformer", *argv]
    try:
        status = keras_transformer_launcher.main()
    except SystemExit as exit:
        status = exit.code
    print("exit", status, flush=True)
losses = [epoch["loss"] for epoch in run_dirs.read_history(run_dir)]
print(json.dumps({"backend": keras.backend.backend(), "loss": losses}))
# What the GPU quality run brings back: slim checkpoints and the run's small files.
sys.path.insert(0, "benchmarks")
import gpu_quality
gpu_quality.bring_back(Path(run_dir), Path(brought))
for attempt in (
    lambda: keras_transformer.train({**config, "vocab_size": 400}, other_run_dir, verbose=0),
    lambda: keras_transformer.train({**config, "data": None, "corpus": "demo"}, other_run_dir),
    lambda: keras_transformer.Translator,
):
    try:
        attempt()
        print("no error")
    except (ValueError, ImportError) as error:
        print(str(error))
print(sorted(m for m in sys.modules if m.startswith("tensorflow")))
"""


@pytest.mark.parametrize("backend", [p for p in BACKENDS if p.values[0] != "tensorflow"])
def test_trained_without_tensorflow_and_brought_back_to_tensorflow(backend, prepared_dir, tmp_path):
    """On JAX or PyTorch, where `import tensorflow` fails: `keras-transformer train
    --data` trains (so `train()` runs: the command calls it), the commands and functions
    that need TensorFlow say so in one line, and the GPU quality run's slim checkpoints
    restore here, on TensorFlow, to the run's weights. That the run then exports and
    serves as it translates in memory follows from two proofs kept elsewhere: its
    `.keras` files load on TensorFlow with equal outputs (above), and an export answers as
    the translator in memory (test_export.py); docs/backends.md runs the whole road, JAX
    training to a translation by the export, as a user would."""
    import json

    from keras_transformer.training import checkpoints, run_dir
    from tests.helpers import TINY_MODEL, TOKENIZER

    run = tmp_path / "run"
    config = {
        **TOKENIZER,
        **TINY_MODEL,
        "data": str(prepared_dir),
        "batch_size": 32,
        # Pairs cut at 24 tokens: 3 length buckets, and 6 batch shapes met here (4 training,
        # 2 validation) for JAX to compile a step for; 15 at the default 128, two thirds of
        # the run's time.
        "max_tokens": 24,
        "epochs": 2,
        "keep_epoch_checkpoints": 2,
    }
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in config.items()]
    flags = [flag.replace("=True", "=true") for flag in flags]
    commands = [
        ["train", "--run-dir", str(run), *flags],
        ["translate", "--model", str(tmp_path), "one two"],
        ["prepare", "--output", str(tmp_path / "data")],
        ["train", "--run-dir", str(tmp_path / "from_text"), "--epochs", "1"],  # text, not --data
    ]
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": python_path()}
    brought = tmp_path / "brought"
    arguments = json.dumps([commands, config, str(run), str(tmp_path / "other"), str(brought)])
    result = subprocess.run(
        [sys.executable, "-c", TRAIN_WITHOUT_TENSORFLOW, arguments],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout.strip().splitlines()
    exits = [line for line in output if line.startswith("exit ")]
    assert exits == ["exit 0", "exit 2", "exit 2", "exit 2"], result.stdout[-3000:]
    # After the commands' own output: what the script prints.
    lines = output[max(i for i, line in enumerate(output) if line.startswith("exit ")) :]
    lines = [line for line in lines if "brought back" not in line]
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 3 and all("needs TensorFlow" in line for line in errors), errors
    assert "Traceback" not in result.stderr
    trained = json.loads(lines[1])
    assert trained["backend"] == backend
    assert len(trained["loss"]) == 2 and trained["loss"][1] < trained["loss"][0]
    # Another vocabulary than the data's is refused in one line naming the data.
    assert "vocab_size" in lines[2] and str(prepared_dir) in lines[2]
    assert lines[3].startswith("Training from text needs TensorFlow")
    assert lines[4].startswith("keras_transformer.Translator needs TensorFlow")
    assert lines[5] == "['tensorflow']"  # the blocked entry: nothing else was imported

    # The GPU quality run's way back (benchmarks/gpu_quality.py): restored here, on
    # TensorFlow, from its slim checkpoints, the run loads with the weights and records
    # it trained.
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_quality

    model, *_ = run_dir.load_run(run)
    restored = tmp_path / "restored"
    gpu_quality.main(["restore", "--brought", str(brought), "--run-dir", str(restored)])
    again, *_ = run_dir.load_run(restored)
    for mine, theirs in zip(model.weights, again.weights, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    for name in ("best.keras", "epoch_0001.keras"):
        records = [checkpoints.read_record(d / "checkpoints" / name) for d in (run, restored)]
        assert records[0] == records[1] and records[0]["epoch"] >= 1


@pytest.mark.skipif(
    not (_available("jax") and _available("keras_hub")),
    reason="the GPU benchmark's test runs on JAX with keras-hub (pip install .[jax,benchmarks])",
)
def test_the_gpu_benchmark_runs_on_jax_without_tensorflow(prepared_dir, tmp_path):
    import json

    # One step (each new batch shape compiles for both models: 3 steps took 19 s, 1 takes 9
    # here); the timed loop's alternating order of the two models is left untested.
    script = (
        "import runpy, sys\n"
        "sys.modules['tensorflow'] = None\n"
        f"sys.argv = ['gpu.py', '--data', {str(prepared_dir)!r}, '--sizes', 'tiny', "
        f"'--steps', '1', '--batch-tokens', '1024', '--peak-tflops', '1', "
        f"'--out', {str(tmp_path / 'gpu.json')!r}]\n"
        f"runpy.run_path({str(REPO / 'benchmarks' / 'gpu.py')!r}, run_name='__main__')\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": python_path()}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ours / KerasHub:" in result.stdout
    (measured,) = json.loads((tmp_path / "gpu.json").read_text())
    assert measured["backend"] == "jax" and measured["target_tokens"] > 0
    for kind in ("ours", "keras_hub"):
        assert measured[kind]["tokens_per_s"] > 0 and 0 < measured[kind]["mfu"] < 1
        assert np.isfinite(measured[kind]["last_loss"])


# On TensorFlow, where tensorflow-text is missing: prepared data still trains.
TRAIN_WITHOUT_TENSORFLOW_TEXT = r"""
import json, sys
sys.modules["tensorflow_text"] = None  # any import of it fails
import keras_transformer

config, run_dir = json.loads(sys.argv[1])
history = keras_transformer.train(config, run_dir, verbose=0)
print(json.dumps(history.history["loss"]))
"""


def test_prepared_data_trains_on_tensorflow_without_tensorflow_text(prepared_dir, tmp_path):
    import json

    from tests.helpers import TINY_MODEL, TOKENIZER

    config = {**TOKENIZER, **TINY_MODEL, "data": str(prepared_dir), "epochs": 1}
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "PYTHONPATH": python_path()}
    result = subprocess.run(
        [sys.executable, "-c", TRAIN_WITHOUT_TENSORFLOW_TEXT, json.dumps([config, str(tmp_path)])],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(json.loads(result.stdout.strip().splitlines()[-1])) == 1
