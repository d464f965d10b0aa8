"""The evaluate and plot commands, end to end on the tiny fixtures."""

import json
import shutil

import pytest
from PIL import Image

from keras_transformer import cli, export

SOURCES = ["three one four", "one five nine two", "two six", "eight"]


@pytest.fixture(scope="module")
def saved_model(tiny_translation_model, tmp_path_factory):
    tiny = tiny_translation_model
    root = tmp_path_factory.mktemp("saved_models")
    export.export_translator(
        tiny.model,
        root,
        "digits",
        source_tokenizer=tiny.source_tokenizer,
        target_tokenizer=tiny.target_tokenizer,
        max_length=16,
    )
    return root / "digits"


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def png_size(path):
    assert path.stat().st_size > 1000
    with Image.open(path) as image:
        assert image.format == "PNG"
        # Not a blank canvas.
        assert len(image.convert("L").getcolors(maxcolors=1 << 16) or [None] * 2) > 1
        return image.size


def test_evaluate_perfect_reference(saved_model, tmp_path, capsys):
    # The model's own translations are a perfect reference: BLEU and chrF are 100.
    model_outputs = [
        t for t, _ in export.translate_texts(export.load_translator(saved_model), SOURCES)
    ]
    assert any(model_outputs)
    src = write_lines(tmp_path / "test.src", SOURCES)
    ref = write_lines(tmp_path / "test.ref", model_outputs)
    out_dir = tmp_path / "eval"
    code = cli.main(
        ["evaluate", "--model", str(saved_model), "--src", str(src), "--ref", str(ref),
         "--tokenize", "none", "--batch-size", "3", "--output-dir", str(out_dir), "--no-progress"]
    )  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)  # stdout is the JSON alone
    assert result["bleu"] == 100.0 and result["chrf"] == 100.0
    assert result["sentences"] == len(SOURCES) and result["search"] == "greedy"
    assert "tok:none" in result["bleu_signature"]
    assert "BLEU 100.00" in captured.err
    assert (out_dir / "translations.txt").read_text(encoding="utf-8").splitlines() == model_outputs
    assert json.loads((out_dir / "scores.json").read_text())["bleu"] == 100.0


def test_evaluate_json_out_beam_and_wrong_reference(saved_model, tmp_path, capsys):
    src = write_lines(tmp_path / "test.src", SOURCES)
    # Digits the model never writes for these sources: a poor score, not 100.
    ref = write_lines(tmp_path / "test.ref", ["7 7 7", "0 0 0 0", "7 0", "5"])
    json_out = tmp_path / "scores" / "result.json"
    code = cli.main(
        ["evaluate", "--model", str(saved_model), "--src", str(src), "--ref", str(ref),
         "--beam", "2", "--output-dir", str(tmp_path / "eval"), "--json-out", str(json_out),
         "--no-progress"]
    )  # fmt: skip
    assert code == 0
    result = json.loads(json_out.read_text())
    assert result["bleu"] < 10 and result["search"] == "beam 2"
    assert capsys.readouterr().out.startswith("BLEU ")


def test_evaluate_rejects_bad_input(saved_model, tmp_path):
    src = write_lines(tmp_path / "test.src", SOURCES)
    short = write_lines(tmp_path / "short.ref", ["3 1 4"])
    base = ["evaluate", "--model", str(saved_model), "--src", str(src), "--no-progress"]
    with pytest.raises(SystemExit, match="4 lines but the reference has 1"):
        cli.main(base + ["--ref", str(short), "--output-dir", str(tmp_path / "e")])
    with pytest.raises(SystemExit, match="no such file"):
        cli.main(base + ["--ref", str(tmp_path / "missing.ref")])
    with pytest.raises(SystemExit, match="--beam"):
        cli.main(base + ["--ref", str(short), "--beam", "0"])
    with pytest.raises(SystemExit):  # argparse: not a sacrebleu tokenizer
        cli.main(base + ["--ref", str(short), "--tokenize", "moses"])


def test_plot_encoding_and_schedule(tmp_path):
    encoding, schedule = tmp_path / "encoding.png", tmp_path / "figures" / "schedule.png"
    cli.main(["plot", "encoding", "--length", "64", "--depth", "32", "--out", str(encoding)])
    cli.main(
        ["plot", "schedule", "--warmup-steps", "400", "--steps", "4000", "--out", str(schedule)]
    )
    width, height = png_size(encoding)
    assert 600 < width < 900 and 400 < height < 600
    width, height = png_size(schedule)
    assert 500 < width < 800 and 300 < height < 500
    with pytest.raises(SystemExit, match="--depth must be positive"):
        cli.main(["plot", "encoding", "--depth", "0", "--out", str(encoding)])


def test_plot_attention_and_curves(tiny_run_dir, tmp_path):
    keys = ("epoch", "loss", "val_loss", "masked_accuracy", "val_masked_accuracy")
    history = [dict(zip(keys, (1, 2.0, 1.8, 0.3, 0.4))), dict(zip(keys, (2, 1.2, 1.1, 0.6, 0.6)))]
    # A copy of the run directory with a history: the session fixture stays untouched.
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    (run / "history.json").write_text(json.dumps(history))
    attention, curves = tmp_path / "attention.png", tmp_path / "curves.png"
    cli.main(
        ["plot", "attention", "--run-dir", str(run), "three one four", "--out", str(attention)]
    )
    cli.main(["plot", "curves", "--run-dir", str(run), "--out", str(curves)])
    width, height = png_size(attention)
    assert width > 600 and height > 250  # four heads side by side
    width, height = png_size(curves)
    assert 800 < width < 1200 and 300 < height < 500
    with pytest.raises(SystemExit, match="history.json"):
        cli.main(["plot", "curves", "--run-dir", str(tiny_run_dir), "--out", str(curves)])
    with pytest.raises(SystemExit, match="No checkpoint"):
        cli.main(["plot", "attention", "--run-dir", str(run), "x", "--checkpoint", "nope.keras",
                  "--out", str(attention)])  # fmt: skip
