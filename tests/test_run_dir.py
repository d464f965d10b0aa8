"""The run directory (`run_dir.py`): damaged or mixed-up run directories give one clear
error naming the file, from the library and as one line from the command line."""

import json
import shutil

import pytest

from keras_transformer import training
from keras_transformer.training import checkpoints, run_dir
from tests.test_cli import user_error
from tests.test_training import TINY


@pytest.fixture
def run(tiny_run_dir, tmp_path):
    """A copy of the tiny run directory, to damage."""
    path = tmp_path / "run"
    shutil.copytree(tiny_run_dir, path)
    return path


def _export_error(capsys, path, tmp_path) -> str:
    root = tmp_path / "saved_models"
    message = user_error(capsys, ["export", str(path), "--name", "x", "--export-root", str(root)])
    assert not (root / "x").exists() or not any((root / "x").iterdir())
    return message


def test_a_truncated_checkpoint(run, tmp_path, capsys):
    best = run / run_dir.BEST_CHECKPOINT
    best.write_bytes(best.read_bytes()[:5000])
    assert checkpoints.read_record(best) is None
    message = _export_error(capsys, run, tmp_path)
    assert message.startswith(f"Checkpoint {best} is damaged or cut short")


@pytest.mark.parametrize(
    "content, problem",
    [
        ('{"model": {', "is not valid JSON"),
        ("\xff\xfe", "is not valid JSON"),
        ("[1, 2]", "must hold a JSON object of sections"),
        ('{"model": {"d_modl": 32}}', "names unknown settings: model.d_modl"),
        ('{"training": {"epochs": 3, "warmup": 1}, "extra": 1}', "unknown settings: extra"),
    ],
)
def test_a_config_file_that_is_not_json_or_names_unknown_settings(
    run, tmp_path, capsys, content, problem
):
    config = run / run_dir.CONFIG_FILE
    config.write_bytes(content.encode("latin-1"))
    message = _export_error(capsys, run, tmp_path)
    assert message.startswith(str(config)) and problem in message


def test_a_missing_vocabulary(run, tmp_path, capsys):
    vocab = run / run_dir.TARGET_VOCAB_FILE
    vocab.unlink()
    message = _export_error(capsys, run, tmp_path)
    assert message.startswith(f"{vocab} is missing: it holds the run's target tokenizer")


def test_a_vocabulary_from_another_run(run, tmp_path, capsys):
    # Another run's vocabulary: another size than the run's model was built for.
    vocab = run / run_dir.SOURCE_VOCAB_FILE
    vocab.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[START]", "[END]", "um"]))
    message = _export_error(capsys, run, tmp_path)
    assert message.startswith(f"{vocab} holds 5 tokens, but the run's model was built for 14")


def test_a_tokenizer_file_of_the_same_size_from_another_run(run, tmp_path, capsys):
    # Told apart by the SHA-256 that config.json records of each tokenizer file.
    config = run_dir.read_config(run)
    settings = run_dir.tokenizer_settings(config)
    config["files"] = run_dir.tokenizer_fingerprints(run, settings)
    run_dir.write_config(run, config)
    run_dir.load_tokenizers(run)
    vocab = run / run_dir.SOURCE_VOCAB_FILE
    tokens = vocab.read_text().splitlines()
    tokens[-2:] = tokens[-1:-3:-1]  # same tokens, other ids
    vocab.write_text("".join(t + "\n" for t in tokens))
    message = _export_error(capsys, run, tmp_path)
    assert message.startswith(f"{vocab} is not the tokenizer this run was trained with")


def test_a_history_file_that_is_not_json(tmp_path):
    (tmp_path / run_dir.HISTORY_FILE).write_text('[{"epoch": 1}, {"ep')
    with pytest.raises(ValueError, match="history.json is not valid JSON"):
        run_dir.read_history(tmp_path)
    (tmp_path / run_dir.HISTORY_FILE).write_text('{"epoch": 1}')
    with pytest.raises(ValueError, match="must hold a JSON list of epochs"):
        run_dir.read_history(tmp_path)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A one-epoch SentencePiece run, made by train()."""
    path = tmp_path_factory.mktemp("trained") / "run"
    training.train({**TINY, "demo_pairs": 200, "epochs": 1}, path, verbose=0)
    return path


def _train_error(capsys, path, tmp_path) -> str:
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**TINY, "demo_pairs": 200, "epochs": 2}))
    return user_error(capsys, ["train", "--run-dir", str(path), "--config", str(config)])


@pytest.mark.slow
def test_a_resumed_run_refuses_a_tokenizer_model_missing_or_from_another_run(
    trained_run, tmp_path, capsys
):
    assert set(run_dir.read_config(trained_run)["files"]) == {
        run_dir.SOURCE_SPM_FILE,
        run_dir.TARGET_SPM_FILE,
    }
    path = tmp_path / "run"
    shutil.copytree(trained_run, path)
    source, target = path / run_dir.SOURCE_SPM_FILE, path / run_dir.TARGET_SPM_FILE
    # The other side's model: a valid SentencePiece model of the same size.
    source.write_bytes(target.read_bytes())
    message = _train_error(capsys, path, tmp_path)
    assert message.startswith(f"{source} is not the tokenizer this run was trained with")
    # A missing one is not learned again, silently, from other text.
    source.unlink()
    message = _train_error(capsys, path, tmp_path)
    assert message.startswith(f"{source} is missing: it holds the run's source tokenizer")
    source.write_bytes(b"\x00" * 100)
    message = _train_error(capsys, path, tmp_path)
    assert message.startswith(f"SentencePiece model {source} is not a valid SentencePiece model")


@pytest.mark.slow
def test_a_resumed_run_refuses_a_config_file_that_is_not_json(trained_run, tmp_path, capsys):
    path = tmp_path / "run"
    shutil.copytree(trained_run, path)
    config = path / run_dir.CONFIG_FILE
    config.write_text(config.read_text()[:100])
    message = _train_error(capsys, path, tmp_path)
    assert message.startswith(f"{config} is not valid JSON")


def test_the_command_line_names_a_config_file_with_unknown_settings(tmp_path, capsys):
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"epochs": 2, "d_modl": 32}))
    message = user_error(
        capsys, ["train", "--run-dir", str(tmp_path / "r"), "--config", str(settings)]
    )
    assert message.startswith(f"Unknown training settings: ['d_modl'] in config file {settings}")
