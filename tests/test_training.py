"""Schedule, masked loss and accuracy, configuration, train() and resuming after a kill."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import cli, run_dir, training
from keras_transformer.training import (
    CustomSchedule,
    MaskedAccuracy,
    MaskedLoss,
    TrainConfig,
    WarmupSchedule,
    masked_accuracy,
    masked_loss,
)
from keras_transformer.translator import Translator

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("step", [0, 1, 10, 999, 1000, 1001, 5000, 100000])
def test_schedule_follows_the_formula(step):
    d_model, warmup = 128, 1000
    expected = d_model**-0.5 * min(max(step, 1) ** -0.5, max(step, 1) * warmup**-1.5)
    assert float(WarmupSchedule(d_model, warmup)(step)) == pytest.approx(expected, rel=1e-5)


def test_schedule_peaks_at_warmup_and_round_trips_config():
    schedule = CustomSchedule(64, warmup_steps=100)
    values = [float(schedule(s)) for s in range(1, 300)]
    assert int(np.argmax(values)) + 1 == 100
    again = WarmupSchedule.from_config(schedule.get_config())
    assert float(again(57)) == float(schedule(57))
    with pytest.raises(ValueError, match="warmup_steps"):
        WarmupSchedule(64, warmup_steps=0)


def _logits_and_labels(seed=0, vocab=7):
    rng = np.random.default_rng(seed)
    labels = np.array([[4, 5, 6, 0, 0], [3, 4, 0, 0, 0]], np.int64)
    logits = rng.normal(size=(2, 5, vocab)).astype(np.float32)
    return labels, logits


def test_loss_ignores_logits_at_padded_positions():
    labels, logits = _logits_and_labels()
    changed = logits.copy()
    changed[labels == 0] = np.random.default_rng(1).normal(size=(5, 7)) * 100
    for smoothing in (0.0, 0.1):
        a = float(masked_loss(labels, logits, smoothing))
        b = float(masked_loss(labels, changed, smoothing))
        assert a == pytest.approx(b, rel=1e-6)
    # ...but the logits at real positions do count.
    changed[0, 0, 4] += 5
    assert float(masked_loss(labels, changed)) != pytest.approx(float(masked_loss(labels, logits)))


def test_loss_is_the_mean_over_real_tokens():
    labels, logits = _logits_and_labels()
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    real = np.argwhere(labels > 0)
    expected = -np.mean([log_p[b, t, labels[b, t]] for b, t in real])
    assert float(masked_loss(labels, logits)) == pytest.approx(expected, rel=1e-5)


def test_label_smoothing_against_a_hand_computation():
    logits = np.array([[[2.0, 0.5, -1.0, 0.0]]], np.float32)
    label = np.array([[1]], np.int64)
    eps, vocab = 0.1, 4
    p = np.exp(logits[0, 0]) / np.exp(logits[0, 0]).sum()
    q = np.full(vocab, eps / vocab)
    q[1] += 1 - eps
    expected = -(q * np.log(p)).sum()
    assert float(masked_loss(label, logits, eps)) == pytest.approx(expected, rel=1e-5)
    assert float(MaskedLoss(label_smoothing=eps)(label, logits)) == pytest.approx(expected, 1e-5)


def test_loss_is_float32_for_half_precision_logits():
    labels, logits = _logits_and_labels()
    loss = masked_loss(labels, tf.constant(logits, tf.float16), 0.1)
    assert loss.dtype == tf.float32
    assert float(loss) == pytest.approx(float(masked_loss(labels, logits, 0.1)), rel=1e-2)


def test_masked_accuracy_counts_real_tokens_only():
    labels = np.array([[4, 5, 0], [6, 0, 0]], np.int64)
    logits = np.zeros((2, 3, 7), np.float32)
    logits[0, 0, 4] = logits[0, 1, 1] = logits[1, 0, 6] = 1.0  # 2 of 3 right
    logits[0, 2, 0] = logits[1, 1, 0] = 1.0  # "right" on padding: must not count
    assert float(masked_accuracy(labels, logits)) == pytest.approx(2 / 3)


def test_accuracy_metric_weighs_tokens_not_batches():
    metric = MaskedAccuracy()
    right = np.eye(7, dtype=np.float32)[[[4, 5, 6, 4]]]  # 4 tokens, all right
    metric.update_state(np.array([[4, 5, 6, 4]]), right)
    metric.update_state(np.array([[4]]), np.eye(7, dtype=np.float32)[[[5]]])  # 1 wrong
    metric.update_state(np.zeros((0, 3), np.int64), np.zeros((0, 3, 7), np.float32))  # empty
    assert float(metric.result()) == pytest.approx(4 / 5)


def test_config_flags_override_file_which_overrides_defaults(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"d_model": 32, "num_heads": 2, "epochs": 7}))
    args = cli.build_parser().parse_args(
        [
            "train",
            "--run-dir",
            "x",
            "--config",
            str(path),
            "--epochs",
            "3",
            "--src",
            "a",
            "--tgt",
            "b",
            "--batch-tokens",
            "512",
            "--lower-case",
            "false",
        ]
    )
    config = cli._config_from_args(args)
    assert (config.d_model, config.num_heads, config.epochs) == (32, 2, 3)
    assert config.corpus == "files" and config.batch_tokens == 512 and config.lower_case is False
    assert config.dff == TrainConfig().dff
    path.write_text(json.dumps({"d_modl": 32}))
    with pytest.raises(ValueError, match="d_modl"):
        TrainConfig.from_file(path)
    with pytest.raises(ValueError, match="mixed_precision"):
        TrainConfig(mixed_precision="half").validate()


TINY = {
    "corpus": "demo",
    "demo_pairs": 400,
    "val_fraction": 0.1,
    "vocab_size": 300,
    "vocab_lower_thresh": 1,
    "num_layers": 1,
    "d_model": 32,
    "num_heads": 2,
    "dff": 64,
    "dropout_rate": 0.0,
    "max_tokens": 16,
    "batch_size": 32,
    "warmup_steps": 30,
}


@pytest.mark.slow
def test_tiny_run_learns_and_fills_the_run_directory(tmp_path):
    history = training.train({**TINY, "epochs": 3}, tmp_path, verbose=0)
    loss = history.history["loss"]
    assert len(loss) == 3 and loss[-1] < 0.6 * loss[0], loss
    assert history.history["val_loss"][-1] < history.history["val_loss"][0]
    for name in (
        run_dir.CONFIG_FILE,
        run_dir.SOURCE_VOCAB_FILE,
        run_dir.TARGET_VOCAB_FILE,
        run_dir.BEST_CHECKPOINT,
        run_dir.LAST_CHECKPOINT,
        run_dir.HISTORY_FILE,
        run_dir.CURVES_FILE,
    ):
        assert (tmp_path / name).is_file(), name
    assert any((tmp_path / run_dir.LOG_DIR).rglob("events.out.tfevents*"))
    entries = run_dir.read_history(tmp_path)
    assert [e["epoch"] for e in entries] == [1, 2, 3]
    assert all(e["target_tokens_per_second"] > 0 for e in entries)
    model, source, target, config = run_dir.load_run(tmp_path)
    assert config["model"]["d_model"] == 32 and config["model"]["num_layers"] == 1
    assert config["model"]["input_vocab_size"] == source.vocab_size
    assert config["tokenizer"] == {"lower_case": True, "normalization_form": "NFC"}
    outputs = Translator(model, source, target, max_length=10)(["one", "twenty-two"])
    assert len(outputs["translation"]) == 2
    # A different model in the same run directory is refused, not mixed in.
    with pytest.raises(ValueError, match="different model"):
        training.train({**TINY, "d_model": 64, "num_heads": 2, "epochs": 5}, tmp_path, verbose=0)


def _epochs_started(log: str) -> list[int]:
    return [
        int(line.split()[1].split("/")[0]) for line in log.splitlines() if line.startswith("Epoch ")
    ]


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_backup(tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**TINY, "demo_pairs": 200, "epochs": 5}))
    command = [
        sys.executable,
        "-m",
        "keras_transformer.cli",
        "train",
        "--run-dir",
        str(tmp_path / "run"),
        "--config",
        str(config),
        "--verbose",
        "2",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    metadata = tmp_path / "run" / run_dir.BACKUP_DIR / "training_metadata.json"
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline and first.poll() is None:
        if metadata.is_file():
            try:
                if json.loads(metadata.read_text())["epoch"] >= 1:
                    break
            except (ValueError, KeyError):
                pass  # being written
        time.sleep(0.05)
    assert first.poll() is None, "the run ended before it could be killed"
    first.send_signal(signal.SIGKILL)
    first.communicate()
    backed_up = json.loads(metadata.read_text())["epoch"]
    assert 1 <= backed_up < 5

    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    started = _epochs_started(second.stdout)
    # It picks up after the backed-up epoch instead of starting again from epoch 1.
    assert started[0] == backed_up + 1 and started[-1] == 5, started
    entries = run_dir.read_history(tmp_path / "run")
    assert [e["epoch"] for e in entries] == list(range(1, 6))
    # The optimizer state came back too: the step count (and so the learning
    # rate) goes on from the backed-up epoch instead of restarting at 0.
    steps = [e["optimizer_steps"] for e in entries]
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False)), steps


def test_time_budget_stops_after_the_epoch_that_passes_it():
    budget = training.TimeBudget(minutes=1e-6)
    budget.set_model(type("FakeModel", (), {"stop_training": False})())
    budget.on_train_begin()
    time.sleep(0.01)
    budget.on_epoch_end(0)
    assert budget.model.stop_training
    generous = training.TimeBudget(minutes=60)
    generous.set_model(type("FakeModel", (), {"stop_training": False})())
    generous.on_train_begin()
    generous.on_epoch_end(0)
    assert not generous.model.stop_training
    with pytest.raises(ValueError, match="time_budget_minutes"):
        training.TimeBudget(minutes=0)


def test_tie_embeddings_reaches_the_model_config():
    config = training.TrainConfig(tie_embeddings=True)
    assert config.model_kwargs(100, 120)["tie_embeddings"] is True
    args = cli.build_parser().parse_args(
        ["train", "--run-dir", "x", "--time-budget-minutes", "2.5", "--tie-embeddings", "true"]
    )
    parsed = cli._config_from_args(args)
    assert parsed.time_budget_minutes == 2.5 and parsed.tie_embeddings is True
