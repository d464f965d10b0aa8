"""train(): a tiny run fills its run directory, and a killed run resumes from its backup."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import keras
import pytest

from keras_transformer import training
from keras_transformer.inference.translator import Translator
from keras_transformer.text import data
from keras_transformer.training import data_sources, resume, run_dir, tokenizer_files
from keras_transformer.training.schedules import Cooldown, InverseSqrtSchedule

REPO = Path(__file__).resolve().parents[1]


TINY = {
    "corpus": "demo",
    "demo_pairs": 400,
    "val_fraction": 0.1,
    # SentencePiece's 4 reserved and 256 byte pieces come first: 500 leaves 240 learned.
    "vocab_size": 500,
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
        run_dir.SOURCE_SPM_FILE,
        run_dir.TARGET_SPM_FILE,
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
    assert config["tokenizer"] == {
        "kind": "sentencepiece",
        "shared_vocab": False,
        "lower_case": False,
        "normalization_form": "NFC",
        "subword_model": "unigram",
        "vocab_size": 500,
    }
    outputs = Translator(model, source, target, max_length=10)(["One.", "Twenty-two."])
    assert len(outputs["translation"]) == 2
    # A different model in the same run directory is refused, not mixed in.
    with pytest.raises(ValueError, match="different model"):
        training.train({**TINY, "d_model": 64, "num_heads": 2, "epochs": 5}, tmp_path, verbose=0)


def test_recipe_settings_reach_the_optimizer_and_keep_epoch_checkpoints(tmp_path, monkeypatch):
    settings = dict(
        TINY,
        epochs=3,
        learning_rate=2e-3,
        weight_decay=1e-4,
        clip_norm=1.0,
        keep_epoch_checkpoints=2,
        lr_cooldown=0.3,
        subword_alpha=0.2,
    )
    batched = []
    make_batches = data.make_batches

    def recording(pairs, *tokenizers, **kwargs):
        batched.append((kwargs["shuffle"], kwargs.get("subword_alpha", 0.0)))
        return make_batches(pairs, *tokenizers, **kwargs)

    monkeypatch.setattr(data, "make_batches", recording)
    training.train(settings, tmp_path, verbose=0)
    # The training pairs are sampled; the validation pairs keep the best segmentation.
    assert batched == [(True, 0.2), (False, 0.0)]
    assert [p.name for p in run_dir.epoch_checkpoints(tmp_path)] == [
        "epoch_0002.keras",
        "epoch_0003.keras",
    ]
    optimizer = keras.models.load_model(tmp_path / run_dir.LAST_CHECKPOINT).optimizer
    assert isinstance(optimizer, keras.optimizers.AdamW)
    assert optimizer.global_clipnorm == 1.0 and optimizer.weight_decay == 1e-4
    # The cooldown round-trips through the checkpoint around the inverse-sqrt schedule.
    assert isinstance(optimizer._learning_rate, Cooldown)
    assert optimizer._learning_rate.fraction == 0.3
    assert isinstance(optimizer._learning_rate.schedule, InverseSqrtSchedule)
    assert optimizer._learning_rate.schedule.peak_learning_rate == 2e-3
    averaged, *_ = run_dir.load_run(tmp_path, average_last=2)
    assert averaged.count_params() == run_dir.load_model(tmp_path).count_params()


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
        "keras_transformer_launcher",
        "train",
        "--run-dir",
        str(tmp_path / "run"),
        "--config",
        str(config),
        "--fit-verbose",
        "2",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    # history.json records an epoch done once its backup is written (backup.py).
    while time.time() < deadline and first.poll() is None:
        if run_dir.read_history(tmp_path / "run"):
            break
        time.sleep(0.05)
    assert first.poll() is None, "the run ended before it could be killed"
    first.send_signal(signal.SIGKILL)
    first.communicate()
    backed_up = len(run_dir.read_history(tmp_path / "run"))
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


def test_a_run_from_before_sentencepiece_resumes_as_wordpiece(tmp_path):
    # config.json as earlier versions wrote it: no tokenizer kind, fewer model options.
    old = training.TrainConfig(tokenizer="wordpiece", lower_case=True)
    model = {k: v for k, v in old.model_kwargs(40, 50).items() if k != "activation"}
    run_dir.write_config(
        tmp_path,
        {
            "model": model,
            "tokenizer": {"lower_case": True, "normalization_form": "NFC"},
            "data": {},
        },
    )
    same = {"model": old.model_kwargs(40, 50), "tokenizer": old.tokenizer_kwargs(), "data": {}}
    resume._check_same_run(tmp_path, same)
    cased = training.TrainConfig(tokenizer="wordpiece")
    with pytest.raises(ValueError, match="different tokenizer"):
        resume._check_same_run(tmp_path, {**same, "tokenizer": cased.tokenizer_kwargs()})


def test_settings_no_model_takes_leave_no_run_directory(tmp_path):
    for values in ({"num_heads": 3}, {"dropout_rate": 1.0}, {"max_length": 8}):
        with pytest.raises(ValueError):
            training.train({**TINY, **values}, tmp_path / "run", verbose=0)
        assert not (tmp_path / "run").exists(), values


def test_a_started_run_refuses_other_tokenizer_settings_before_learning_any(tmp_path, monkeypatch):
    config = training.TrainConfig.from_dict(TINY)
    data = {k: getattr(config, k) for k in ("corpus", "src", "tgt", "tsv", "tfds_name")}
    data.update(demo_pairs=config.demo_pairs, demo_languages=config.demo_languages)
    run_dir.write_config(
        tmp_path,
        {"model": {}, "tokenizer": config.tokenizer_kwargs(), "data": data},
    )

    def must_not_learn(*args, **kwargs):
        raise AssertionError("learned a tokenizer for a run it then refused")

    monkeypatch.setattr(tokenizer_files, "learn_sentencepiece_model", must_not_learn)
    with pytest.raises(ValueError, match="different tokenizer settings") as error:
        training.train({**TINY, "shared_vocab": True}, tmp_path, verbose=0)
    # Only what changed, not two whole dicts.
    assert "(shared_vocab False -> True)" in str(error.value)
    assert not (tmp_path / run_dir.JOINT_SPM_FILE).exists()


def test_tokenizer_files_of_a_start_that_never_wrote_its_config_are_learned_again(
    tmp_path, monkeypatch
):
    # A start stopped before config.json (Ctrl-C while learning the target side) may
    # have learned its source side from another corpus.
    stale = tmp_path / run_dir.SOURCE_SPM_FILE
    stale.write_bytes(b"learned from the wrong corpus")

    class Stop(Exception):
        pass

    def build(config, train_pairs, path):
        assert not stale.exists(), "a stale tokenizer file was kept"
        raise Stop

    monkeypatch.setattr(data_sources, "build_tokenizers", build)
    with pytest.raises(Stop):
        training.train(TINY, tmp_path, verbose=0)


def test_a_corpus_file_named_another_way_is_the_same_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.pt").write_text("um\n")
    config = {"model": {}, "tokenizer": {"lower_case": True}}
    data = {"corpus": "files", "src": "train.pt", "tgt": "train.en", "tsv": None}
    run_dir.write_config(tmp_path / "run", {**config, "data": data})
    tokenizer = run_dir.tokenizer_settings(config)
    for src in ("./train.pt", str(tmp_path / "train.pt")):
        same = {"tokenizer": tokenizer, "data": {**data, "src": src}}
        resume._check_same_run(tmp_path / "run", same)
    with pytest.raises(ValueError, match="src 'train.pt' -> 'other.pt'"):
        resume._check_same_run(
            tmp_path / "run", {"tokenizer": tokenizer, "data": {**data, "src": "other.pt"}}
        )
