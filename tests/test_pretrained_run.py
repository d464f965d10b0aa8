"""An imported Marian checkpoint as a run directory: its export against transformers'
outputs, fine-tuning with `train --init-from`, and checkpoints that are refused.

One export of an imported fixture checkpoint serves every export test (exports are
costly: each traces every signature); it is loaded in a fresh interpreter that cannot
import keras_transformer, as the model server loads it. The fine-tuned run is exported by
the command line with the save caught, and its translator translates.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from keras_transformer import cli
from keras_transformer.inference import export
from keras_transformer.pretrained import CheckpointError, import_marian
from keras_transformer.training import run_dir as run_dir_lib
from keras_transformer.training.run import train
from tests.helpers import caught_export_saves
from tests.test_cli import user_error
from tests.test_export import serve_in_fresh_process

FIXTURES = Path(__file__).parent / "data" / "marian"
CHECKPOINT = FIXTURES / "joint_swish"


@pytest.fixture(scope="module")
def reference():
    return json.loads((CHECKPOINT / "reference.json").read_text())


@pytest.fixture(scope="module")
def imported_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("marian") / "run"
    assert cli.main(["import-marian", str(CHECKPOINT), "--run-dir", str(run)]) == 0
    return run


@pytest.fixture(scope="module")
def exported(imported_run, reference, tmp_path_factory):
    # transformers' settings of the references: a cap of max_length positions (the
    # decoder's start included), the last one </s>, which a row limit of that many
    # tokens gives; beam 4 without length normalization.
    steps = reference["max_length"] - 1
    return export.export_run(
        imported_run,
        tmp_path_factory.mktemp("exports"),
        name="marian",
        max_length=steps,
        max_length_a=0.0,
        max_length_b=steps,
        beam_width=4,
        length_penalty_alpha=0.0,
    )


def test_the_run_directory_is_an_ordinary_one(imported_run):
    config = run_dir_lib.read_config(imported_run)
    assert config["tokenizer"] == {"kind": "marian", "shared_vocab": False}
    assert config["pretrained"]["kind"] == "marian"
    assert config["model"]["position_layout"] == "halves"
    assert not config["model"]["source_start"]
    model, source, target, _ = run_dir_lib.load_run(imported_run)
    assert model.input_vocab_size == source.vocab_size == target.vocab_size
    # Nothing half-written beside it.
    assert [p.name for p in imported_run.parent.iterdir()] == ["run"]


def test_all_six_signatures_answer_as_transformers(exported, reference):
    sources = reference["sources"]
    # The helper sends each text's characters as bytes (latin-1): these are UTF-8's.
    raw = [text.encode("utf-8").decode("latin-1") for text in sources]
    answers = serve_in_fresh_process(exported, raw, ["" for _ in sources])
    assert answers["serving_default"]["translation"] == reference["greedy_decoded"]
    assert answers["greedy_with_prefix"]["translation"] == reference["greedy_decoded"]
    beam = answers["beam_search"]["translation"]
    same = sum(a == b for a, b in zip(beam, reference["beam_decoded"]))
    assert same >= 0.9 * len(sources), (beam, reference["beam_decoded"])
    assert answers["beam_search_with_prefix"]["translation"] == beam
    assert [row[0] for row in answers["nbest"]["translations"]] == beam
    assert all(len(row) == 2 for row in answers["nbest"]["translations"])


def test_the_score_signature_equals_teacher_forced_log_probabilities(exported, reference):
    """Targets that fit the export's `max_length` score transformers' log-probabilities
    (pad suppressed, as generate sees them); longer ones are cut there and say so."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(exported))
    count = len(reference["targets"])
    outputs = loaded.signatures["score"](
        source=tf.constant(reference["sources"][:count]),
        target=tf.constant(reference["targets"]),
    )
    fits = np.array([len(ids) < reference["max_length"] for ids in reference["target_ids"]])
    assert fits.sum() >= 3
    np.testing.assert_array_equal(outputs["target_truncated"].numpy(), ~fits)
    expected = np.array([sum(row) for row in reference["teacher_forced_log_probs"]])
    np.testing.assert_allclose(outputs["score"].numpy()[fits], expected[fits], atol=1e-4, rtol=0)


# -- fine-tuning ---------------------------------------------------------------------

# Word-for-word pairs in the fixtures' made-up language pair (make_fixtures.py).
EN = "the small dog sees a red house big cat old tree river city".split()
DE = "der kleine Hund sieht ein rotes Haus groß Katze alt Baum Fluss Stadt".split()


def in_domain_pairs(count: int, seed: int) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    sources, targets = [], []
    for _ in range(count):
        words = rng.integers(len(EN), size=rng.integers(2, 7))
        sources.append(" ".join(EN[w] for w in words).capitalize() + ".")
        targets.append(" ".join(DE[w] for w in words).capitalize() + ".")
    return sources, targets


def test_fine_tuning_lowers_the_loss_and_the_run_exports_and_translates(imported_run, tmp_path):
    sources, targets = in_domain_pairs(192, seed=1)
    val_sources, val_targets = in_domain_pairs(32, seed=2)
    files = {}
    for name, lines in (
        ("src", sources),
        ("tgt", targets),
        ("val_src", val_sources),
        ("val_tgt", val_targets),
    ):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text("\n".join(lines) + "\n")
    run = tmp_path / "tuned"
    history = train(
        {
            "init_from": str(imported_run),
            **{name: str(path) for name, path in files.items()},
            "epochs": 3,
            "batch_size": 32,
            "learning_rate": 3e-3,
            "warmup_steps": 5,
            "early_stopping_patience": 2,
            "dropout_rate": 0.0,
            "max_tokens": 32,  # the fixture's positions are 64
        },
        run,
        verbose=0,
    )
    losses = history.history["val_loss"]
    print(f"fine-tuning: validation loss by epoch {losses}")
    assert losses[-1] < losses[0], losses
    # The imported tokenizers, copied and not learned: the same files.
    for name in ("marian_source.json", "marian_target.json"):
        assert (run / name).read_bytes() == (imported_run / name).read_bytes()
    # `keras-transformer export` takes the fine-tuned run, and the translator it would save
    # translates. The save is caught: what an export of an imported Marian run writes and
    # serves is the first tests' (one export traces every signature).
    with pytest.MonkeyPatch.context() as patch:
        saved = caught_export_saves(patch)
        argv = ["export", str(run), "--export-root", str(tmp_path / "exports"), "--name", "tuned"]
        assert cli.main(argv) == 0
    (translator,) = saved
    (translation,) = translator(["The small dog sees a cat."])["translation"].numpy()
    assert translation.decode("utf-8").strip()


# -- refused checkpoints ---------------------------------------------------------------


def broken(tmp_path: Path, change) -> Path:
    """A copy of the fixture checkpoint with `change(directory)` applied."""
    directory = tmp_path / "checkpoint"
    shutil.copytree(CHECKPOINT, directory)
    change(directory)
    return directory


def edit_config(**settings):
    def change(directory):
        path = directory / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **settings}))

    return change


def truncate(directory):
    path = directory / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def damaged_pytorch_only(directory):
    """A pytorch_model.bin alone, but not the zip archive torch.save writes."""
    (directory / "model.safetensors").rename(directory / "pytorch_model.bin")


BAD = {
    "not a checkpoint": (lambda d: (d / "config.json").unlink(), "config.json is missing"),
    "not marian": (edit_config(model_type="bart"), "model_type is 'bart'"),
    "no source.spm": (lambda d: (d / "source.spm").unlink(), "source.spm is missing"),
    "no vocab.json": (lambda d: (d / "vocab.json").unlink(), "vocab.json is missing"),
    "shapes": (
        edit_config(encoder_ffn_dim=64, decoder_ffn_dim=64),
        "fc1.weight has shape (32, 16), but config.json makes it (64, 16)",
    ),
    "truncated": (truncate, "model.safetensors cannot be read as safetensors"),
    "pytorch": (damaged_pytorch_only, "pytorch_model.bin is not the zip archive torch.save"),
    "normalize_before": (edit_config(normalize_before=True), "normalize_before=true"),
    "activation": (edit_config(activation_function="gelu_new"), "activation_function='gelu_new'"),
    "final norm": (edit_config(add_final_layer_norm=True), "add_final_layer_norm=true"),
    "scale": (edit_config(scale_embedding=2.0), "scale_embedding=2.0"),
    "heads": (edit_config(decoder_attention_heads=4), "decoder_attention_heads=4 differ"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_checkpoint_is_refused_in_one_line_and_leaves_nothing(case, tmp_path, capsys):
    change, expected = BAD[case]
    checkpoint = broken(tmp_path, change)
    run = tmp_path / "runs" / "run"
    with pytest.raises(CheckpointError) as error:
        import_marian(checkpoint, run)
    assert expected in str(error.value) and "\n" not in str(error.value), str(error.value)
    assert not run.exists()
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    # The command says the same in one line, without a traceback.
    message = user_error(capsys, ["import-marian", str(checkpoint), "--run-dir", str(run)])
    assert expected in message


def test_an_existing_run_directory_is_not_overwritten(imported_run, capsys):
    message = user_error(capsys, ["import-marian", str(CHECKPOINT), "--run-dir", str(imported_run)])
    assert "exists and is not empty" in message
