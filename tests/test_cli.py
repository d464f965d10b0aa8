"""The command line: every subcommand end to end on the tiny fixtures, its settings, its
help, and its user errors (one line, exit status 2, no traceback)."""

import argparse
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import keras_transformer_commands as commands
import keras_transformer_launcher as launcher
from keras_transformer import cli
from keras_transformer.inference import loaded_export
from keras_transformer.inference.translator import Translator
from keras_transformer.training import run_dir
from keras_transformer.training.config import TrainConfig
from tests.helpers import caught_export_saves, write_corpus

REPO = Path(__file__).resolve().parents[1]
SOURCES = ["three one four", "one five nine two", "two six", "eight"]
ERROR_PREFIX = "keras-transformer: error: "
# What TensorFlow's C++ start-up log looks like: absl's preamble, glog-style lines
# ("I0000 00:00:... port.cc:153] oneDNN custom operations are on...") and the CPU
# feature notice's second line.
TF_LOG_LINE = re.compile(
    r"absl::InitializeLog|^[IWEF]\d{4} \d\d:\d\d:|oneDNN|cpu_feature_guard|"
    r"To enable the following instructions",
    re.MULTILINE,
)


@pytest.fixture(scope="module")
def saved_model(tiny_export):
    """The model directory of the session's export of the tiny model (conftest.py)."""
    return tiny_export.path.parent


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


def user_error(capsys, argv) -> str:
    """Runs the command, which must fail as a user error; returns the error message."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.startswith(ERROR_PREFIX), err
    return err[len(ERROR_PREFIX) :].rstrip("\n")


# ----------------------------------------------------------------------------- evaluate


def test_evaluate_perfect_reference(saved_model, tmp_path, capsys):
    # The model's own translations are a perfect reference: BLEU and chrF are 100.
    model_outputs = [
        t
        for t, _ in loaded_export.translate_texts(
            loaded_export.load_translator(saved_model), SOURCES
        )
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
    # scores.json says what produced it, as the printed JSON does.
    recorded = json.loads((out_dir / "scores.json").read_text())
    assert recorded["bleu"] == 100.0 and recorded["search"] == "greedy"
    assert recorded["model"] == str(saved_model) and recorded["ref"] == str(ref)
    assert recorded["src"] == str(src) and recorded["moses"] is None


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


def test_evaluate_rejects_bad_input(saved_model, tmp_path, capsys):
    src = write_lines(tmp_path / "test.src", SOURCES)
    short = write_lines(tmp_path / "short.ref", ["3 1 4"])
    missing = tmp_path / "missing.ref"
    base = ["evaluate", "--model", str(saved_model), "--src", str(src), "--no-progress"]
    message = user_error(capsys, base + ["--ref", str(short), "--output-dir", str(tmp_path / "e")])
    assert "4 lines but the reference has 1" in message
    message = user_error(capsys, base + ["--ref", str(missing)])
    assert message == f"{missing}: No such file or directory"
    assert user_error(capsys, base + ["--ref", str(short), "--beam", "0"]) == (
        "--beam must be positive, got 0"
    )
    assert "--batch-size" in user_error(capsys, base + ["--ref", str(short), "--batch-size", "0"])
    # argparse's own errors keep argparse's form: usage, then "PROG SUBCOMMAND: error: ...".
    with pytest.raises(SystemExit) as exit_info:
        cli.main(base + ["--ref", str(short), "--tokenize", "moses"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "keras-transformer evaluate: error: argument --tokenize: invalid choice" in err
    assert not (tmp_path / "e").exists(), "nothing is written when the input is refused"
    empty = write_lines(tmp_path / "empty.txt", [])
    empty_set = ["--src", str(empty), "--ref", str(empty), "--output-dir", str(tmp_path / "e")]
    message = user_error(capsys, ["evaluate", "--model", str(saved_model), *empty_set])
    assert message == "The source has no lines: there is nothing to translate and score."
    # sacremoses would take English's rules for a code it lacks, silently.
    message = user_error(capsys, base + ["--ref", str(src), "--moses", "German"])
    assert message.startswith("sacremoses has no Moses rules for language 'German'")
    assert not (tmp_path / "e").exists()
    # An output directory that cannot be made fails before anything is translated.
    a_file = write_lines(tmp_path / "a_file", ["x"])
    message = user_error(capsys, base + ["--ref", str(src), "--output-dir", str(a_file / "e")])
    assert str(a_file) in message


def test_evaluate_keeps_another_evaluations_results(saved_model, tmp_path, capsys):
    src = write_lines(tmp_path / "test.src", SOURCES)
    ref = write_lines(tmp_path / "test.ref", ["3 1 4"] * len(SOURCES))
    other_ref = write_lines(tmp_path / "other.ref", ["1"] * len(SOURCES))
    out = tmp_path / "eval"
    base = ["evaluate", "--model", str(saved_model), "--src", str(src), "--no-progress",
            "--output-dir", str(out)]  # fmt: skip
    assert cli.main(base + ["--ref", str(ref)]) == 0
    scores = (out / "scores.json").read_text()
    # The same evaluation again may replace its own results...
    assert cli.main(base + ["--ref", str(ref)]) == 0
    capsys.readouterr()
    # ...another's (another reference, another search) may not.
    for more in (["--ref", str(other_ref)], ["--ref", str(ref), "--beam", "2"]):
        message = user_error(capsys, base + more)
        assert message.startswith(f"{out} holds the results of another evaluation"), message
        assert (out / "scores.json").read_text() == scores


# ----------------------------------------------------------------------------- score


def test_score_prints_one_line_a_pair_batch_by_batch(saved_model, tmp_path, capsys):
    """SCORE<TAB>NORMALIZED per pair, the export's `score` signature's figures, whatever
    the batch size; cut pairs are counted on stderr, by line."""
    sources = [*SOURCES, " ".join(["two"] * 40), ""]
    targets = ["3 1 4", "1 5 9 2", "", "8 8", "2", ""]
    src = write_lines(tmp_path / "test.src", sources)
    tgt = write_lines(tmp_path / "test.tgt", targets)
    expected = loaded_export.score_pairs(
        loaded_export.load_translator(saved_model),
        [s.encode() for s in sources],
        [t.encode() for t in targets],
    )
    printed = []
    for batch_size in ("2", "256"):
        argv = ["score", "--model", str(saved_model), "--src", str(src), "--tgt", str(tgt)]
        assert cli.main([*argv, "--batch-size", batch_size]) == 0
        captured = capsys.readouterr()
        printed.append(captured.out)
        assert captured.err == (
            "keras-transformer: note: 1 of 6 pairs had a source or target longer than the "
            "model's limits, cut there before scoring (lines 5)\n"
        )
    expected_rows = np.stack([expected["score"], expected["normalized_score"]], axis=1)
    for out in printed:
        rows = [line.split("\t") for line in out.splitlines()]
        assert len(rows) == len(sources) and all(len(row) == 2 for row in rows)
        scores = [[float(score), float(normalized)] for score, normalized in rows]
        # Batches of other sizes pad to other lengths, so the sums round differently:
        # the printed figures may differ in their last digits (seen on AVX2 kernels).
        np.testing.assert_allclose(scores, expected_rows, atol=1e-4)
    assert all(score <= 0 for score, _ in scores)
    assert scores[0][0] > scores[3][0]  # "3 1 4" is right, "8 8" is not


def test_score_user_errors(saved_model, tmp_path, capsys):
    src = write_lines(tmp_path / "test.src", SOURCES)
    short = write_lines(tmp_path / "short.tgt", ["3 1 4"])
    missing = tmp_path / "missing.tgt"
    base = ["score", "--model", str(saved_model), "--src", str(src)]
    assert user_error(capsys, base + ["--tgt", str(short)]) == (
        f"{src} has 4 lines but {short} has 1: the files must be line-aligned"
    )
    assert user_error(capsys, base + ["--tgt", str(missing)]) == (
        f"{missing}: No such file or directory"
    )
    undecodable = tmp_path / "bad.tgt"
    undecodable.write_bytes(b"3 1 4\n1 \xff 5\n6\n8\n")
    assert user_error(capsys, base + ["--tgt", str(undecodable)]) == (
        f"{undecodable}: line 2 is not valid UTF-8 (invalid start byte at byte 2)"
    )
    assert user_error(capsys, base + ["--tgt", str(src), "--batch-size", "0"]) == (
        "--batch-size must be positive, got 0"
    )
    message = user_error(capsys, base + ["--tgt", str(src), "--model", str(missing)])
    assert message.startswith(f"No SavedModel at {missing}")
    # An export made before the `score` signature existed.
    old = tmp_path / "old" / "1"
    old.parent.mkdir()
    tf.saved_model.save(tf.Module(), str(old))
    message = user_error(capsys, base + ["--tgt", str(src), "--model", str(old)])
    assert message.startswith("This export has no `score` signature")


def test_score_says_it_needs_tensorflow_where_it_is_absent(monkeypatch, capsys):
    monkeypatch.setattr(cli, "translate", None)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["score", "--model", "m", "--src", "s", "--tgt", "t"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith(ERROR_PREFIX + "`keras-transformer score` needs TensorFlow")
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert "score given translations with an exported SavedModel (needs TensorFlow)" in shown


# ----------------------------------------------------------------------------- export, translate


@pytest.fixture(scope="module")
def cli_export(tiny_run_dir, tmp_path_factory):
    """`keras-transformer export` of the tiny run (16 tokens, beam width 3) beside an older
    version, as (argv, model directory): the export and translate tests share it."""
    root = tmp_path_factory.mktemp("cli_saved_models")
    (root / "numbers" / "3").mkdir(parents=True)  # an older version: the next one is 4
    argv = ["export", str(tiny_run_dir), "--name", "numbers", "--export-root", str(root)]
    assert cli.main(argv + ["--max-length", "16", "--beam-width", "3"]) == 0
    return argv, root / "numbers"


def test_cli_export_from_a_run_dir_and_translate(cli_export, capsys, monkeypatch):
    argv, model_dir = cli_export
    assert (model_dir / "4" / "saved_model.pb").is_file()
    model = str(model_dir)
    assert cli.main(["translate", "--model", model, "three one four", "", "five"]) == 0
    out = capsys.readouterr().out.split("\n")
    # One line per input and a final newline. What the model says for an empty
    # source was never trained (the tiny task has no empty pairs), so only its
    # neighbours are pinned: the empty row must not shift or spoil them.
    assert len(out) == 4 and out[-1] == ""
    assert out[0] == "3 1 4" and out[2] == "5"
    assert cli.main(["translate", "--model", model, "--beam", "2", "--scores", "nine"]) == 0
    score, translation = capsys.readouterr().out.rstrip("\n").split("\t")
    assert translation == "9" and float(score) <= 0
    # From stdin, in batches, with a line of undecodable bytes and one holding a "\r"
    # (one line, not two: a split there would shift every later translation).
    lines = b"three one four\n\n\xff\xfe bad bytes\nseven\rtwo\r\n" + b"nine five\n" * 5
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(lines)))
    assert cli.main(["translate", "--model", model, "--batch-size", "3"]) == 0
    out = capsys.readouterr().out.split("\n")
    assert len(out) == 9 + 1 and out[0] == "3 1 4" and out[4:9] == ["9 5"] * 5
    # The same version again is refused, and the existing export is left alone.
    message = user_error(capsys, argv + ["--version", "4"])
    assert str(model_dir / "4") in message and "exists" in message
    assert sorted(p.name for p in model_dir.iterdir()) == ["3", "4"]


def test_cli_export_of_fewer_signatures_and_what_it_refuses(tiny_run_dir, tmp_path, capsys):
    """`export --signatures serving_default` writes that signature alone: `translate`
    answers through it, and a search it lacks is a one-line error naming the signature to
    export (test_export.py checks what such an export holds); a name that is no
    signature is refused before the run loads."""
    root = tmp_path / "saved_models"
    argv = ["export", str(tiny_run_dir), "--name", "greedy", "--export-root", str(root)]
    assert cli.main(argv + ["--signatures", "serving_default", "--max-length", "16"]) == 0
    model = str(root / "greedy")
    assert cli.main(["translate", "--model", model, "three one four"]) == 0
    assert capsys.readouterr().out.split("\n")[-2] == "3 1 4"
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("9\n", encoding="utf-8")
    src, tgt = write_corpus(tmp_path, [("one", "1")])
    output_dir = tmp_path / "evaluation"
    evaluation = ["--src", str(src), "--ref", str(tgt), "--output-dir", str(output_dir)]
    lacking = [  # (the signature, the command that needs it)
        ("beam_search", ["translate", "--beam", "2", "nine"]),
        ("nbest", ["translate", "--n-best", "2", "nine"]),
        ("greedy_with_prefix", ["translate", "--prefix", str(prefixes), "nine"]),
        ("beam_search_with_prefix", ["translate", "--prefix", str(prefixes), "--beam", "2", "x"]),
        ("score", ["score", "--src", str(src), "--tgt", str(tgt)]),
        ("beam_search", ["evaluate", *evaluation, "--beam", "2", "--no-progress"]),
    ]
    for signature, (command, *flags) in lacking:
        message = user_error(capsys, [command, "--model", model, *flags])
        assert f"with {signature} among its signatures" in message, (command, flags)
    assert not output_dir.exists()  # refused before anything is written
    # Checked first: the run named here does not exist.
    missing = ["export", str(tmp_path / "no_run"), "--name", "x"]
    message = user_error(capsys, [*missing, "--signatures", "serving_default,beam"])
    assert "serving_default, beam_search" in message and "'beam'" in message
    assert sorted(p.name for p in (root / "greedy").iterdir()) == ["1"]


def test_cli_export_with_broadcast_attention_translates_alike(
    tiny_run_dir, tmp_path, capsys, monkeypatch
):
    """`export --broadcast-attention` (for oneDNN model servers) writes an export whose
    searches attend with broadcast products at every row count: the same translations,
    here over more rows than the matmul form starts at."""
    root = tmp_path / "saved_models"
    argv = ["export", str(tiny_run_dir), "--name", "broadcast", "--export-root", str(root)]
    assert cli.main(argv + ["--signatures", "serving_default", "--broadcast-attention"]) == 0
    capsys.readouterr()
    texts = ["three one four", "nine five"] * 10  # 20 rows: past MATMUL_ATTENTION_ROWS
    assert cli.main(["translate", "--model", str(root / "broadcast"), *texts]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == ["3 1 4", "9 5"] * 10
    # The flag reaches the translator saved, and the setting every search it builds.
    saved = caught_export_saves(monkeypatch)
    assert cli.main(argv + ["--broadcast-attention", "--version", "7"]) == 0
    assert saved[0].options.matmul_attention is False
    model, source, target, _ = run_dir.load_run(tiny_run_dir)
    decoder = Translator(model, source, target, matmul_attention=False).decoder
    assert not decoder.greedy.matmul_attention and not decoder.beam.matmul_attention


@pytest.mark.half_precision
def test_cli_export_in_bfloat16_and_the_warning_where_it_would_be_slow(
    tiny_run_dir, tmp_path, capsys, monkeypatch
):
    """`export --compute-dtype bfloat16` writes a bfloat16 export that `translate` answers
    with, saying in one line on stderr where this machine would emulate it; a dtype it
    does not offer is a usage error."""
    root = tmp_path / "saved_models"
    argv = ["export", str(tiny_run_dir), "--name", "half", "--export-root", str(root)]
    flags = ["--signatures", "serving_default", "--max-length", "16"]
    assert cli.main(argv + flags + ["--compute-dtype", "bfloat16"]) == 0
    assert commands.export_compute_dtype(root / "half" / "1") == "bfloat16"
    capsys.readouterr()
    reason = "this CPU has no bfloat16 instructions"
    shown_as = []

    def slow_here():
        shown_as.append(warnings.formatwarning)  # what `cli.main` has installed
        return reason

    monkeypatch.setattr(loaded_export, "slow_bfloat16_reason", slow_here)
    # pytest records warnings itself; the command line shows each as one line.
    with pytest.warns(loaded_export.SlowExportWarning) as caught:
        assert cli.main(["translate", "--model", str(root / "half"), "three one four"]) == 0
    assert capsys.readouterr().out == "3 1 4\n"
    (warning,) = [w for w in caught if w.category is loaded_export.SlowExportWarning]
    assert shown_as == [cli._warning_line]
    assert cli._warning_line(warning.message, warning.category, "file.py", 1) == (
        f"keras-transformer: warning: {root / 'half' / '1'} computes in bfloat16, but {reason}.\n"
    )
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv + ["--compute-dtype", "float16"])
    assert exit_info.value.code == 2 and "invalid choice: 'float16'" in capsys.readouterr().err
    assert sorted(p.name for p in (root / "half").iterdir()) == ["1"]


def test_cli_translate_n_best_and_prefix(cli_export, tmp_path, capsys):
    """`--n-best K`: K lines a sentence, ROW<TAB>SCORE<TAB>TRANSLATION, the first the
    beam's; `--prefix FILE`: each translation starts with its line's prefix; K above the
    beam width and a prefix file of another length are one-line errors."""
    model = str(cli_export[1])
    capsys.readouterr()
    assert cli.main(["translate", "--model", model, "--n-best", "3", "three one four", "nine"]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [row for row, _, _ in lines] == ["1"] * 3 + ["2"] * 3
    assert all(float(score) <= 0 for _, score, _ in lines)
    assert lines[0][2] == "3 1 4" and lines[3][2] == "9"
    assert cli.main(["translate", "--model", model, "--beam", "3", "--scores", "nine"]) == 0
    assert capsys.readouterr().out == f"{lines[3][1]}\t9\n"
    assert cli.main(["translate", "--model", model, "--n-best", "4", "--beam", "5", "nine"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    assert user_error(capsys, ["translate", "--model", model, "--n-best", "4", "nine"]) == (
        "--n-best 4 is above the export's beam width (3): give --beam N with N >= K"
    )
    message = user_error(capsys, ["translate", "--model", model, "--n-best", "3", "--beam", "2"])
    assert message == "--n-best 3 is above the beam width (--beam 2)"
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_bytes(b"9 9\n\n")
    for search in ([], ["--beam", "2"]):
        command = ["translate", "--model", model, "--prefix", str(prefixes), *search]
        assert cli.main(command + ["three one four", "five"]) == 0
        first, second = capsys.readouterr().out.splitlines()
        assert first.startswith("9 9") and second == "5"
    # The export's longest translation is 16 tokens: a prefix of 20 is cut at 15, and said.
    prefixes.write_bytes(b" ".join([b"9"] * 20) + b"\n\n")
    assert cli.main(["translate", "--model", model, "--prefix", str(prefixes), "one", "two"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].split() == ["9"] * 15
    assert captured.err.endswith(
        "note: 1 of 2 prefixes were longer than the model's longest translation less one token "
        "and were cut there before translating (rows 1)\n"
    )
    prefixes.write_bytes(b"9 9\n\n")
    message = user_error(capsys, ["translate", "--model", model, "--prefix", str(prefixes), "x"])
    assert message == f"--prefix {prefixes} has 2 lines for 1 sentences"
    both = ["translate", "--model", model, "--prefix", str(prefixes), "--n-best", "2", "x", "y"]
    assert user_error(capsys, both).startswith("--n-best and --prefix do not go together")


def test_export_and_translate_user_errors(tiny_run_dir, tmp_path, capsys):
    not_a_run = tmp_path / "not_a_run"
    not_a_run.mkdir()
    message = user_error(capsys, ["export", str(not_a_run), "--name", "x"])
    assert message == f"{not_a_run} is not a run directory: {not_a_run / 'config.json'} is missing."
    # A run without a finished epoch has no checkpoint to export.
    unfinished = tmp_path / "unfinished"
    shutil.copytree(tiny_run_dir, unfinished)
    shutil.rmtree(unfinished / "checkpoints")
    message = user_error(capsys, ["export", str(unfinished), "--name", "x"])
    assert message.startswith("No checkpoint at ") and "best.keras" in message
    missing_model = tmp_path / "saved_models" / "nothing"
    message = user_error(capsys, ["translate", "--model", str(missing_model), "one"])
    assert message.startswith(f"No SavedModel at {missing_model}")
    # Bad numbers are refused before the model is loaded.
    assert user_error(capsys, ["translate", "--model", str(missing_model), "--beam", "0"]) == (
        "--beam must be positive, got 0"
    )
    assert user_error(capsys, ["translate", "--model", "m", "--batch-size", "0", "one"]) == (
        "--batch-size must be positive, got 0"
    )


def test_export_stores_the_source_limit_of_training(tiny_run_dir, tiny_export, tmp_path, capsys):
    """`keras-transformer export` cuts sources where the run's training did (its
    max_tokens), or at --max-source-length. The saves are caught: what the export
    writes of a translator, its limits included, is test_export.py's."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    config = json.loads((run / "config.json").read_text())
    config["training"] = {"max_tokens": 10}
    (run / "config.json").write_text(json.dumps(config))
    root = tmp_path / "saved_models"
    argv = ["export", str(run), "--name", "numbers", "--export-root", str(root)]
    with pytest.MonkeyPatch.context() as patch:
        saved = caught_export_saves(patch)
        assert cli.main(argv) == 0
        assert cli.main(argv + ["--max-source-length", "6", "--sub-batch-size", "8"]) == 0
    first, second = saved
    limits = {key: int(value) for key, value in first.serving_limits().items()}
    assert (limits["max_source_length"], limits["sub_batch_size"]) == (10, 64)
    assert (second.max_source_length, second.options.sub_batch_size) == (6, 8)
    # [START], 5 or 9 words, [END]: 7 and 11 tokens.
    text = ["one two three four five", "one two three four five six seven eight nine"]
    assert first.translate(tf.constant(text))["source_truncated"].numpy().tolist() == [False, True]
    assert second.translate(tf.constant(text))["source_truncated"].numpy().tolist() == [True, True]
    # `translate` says which rows were cut, apart from the translations: the session's
    # export cuts sources at the model's 24 tokens.
    capsys.readouterr()
    long = " ".join(["one"] * 23)
    assert cli.main(["translate", "--model", str(tiny_export.path), *text, long]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3
    assert err == (
        "keras-transformer: note: 1 of 3 sources were longer than the model's source limit "
        "and were cut there before translating (rows 3)\n"
    )
    # Bad limits: one line each, and no export.
    assert user_error(capsys, argv + ["--sub-batch-size", "0"]) == (
        "--sub-batch-size must be positive, got 0"
    )
    message = user_error(capsys, argv + ["--max-source-length", "1"])
    assert "max_source_length" in message and "Received: max_source_length=1" in message
    message = user_error(capsys, argv + ["--max-source-length", "25"])
    assert "at most the model's max_length (24)" in message
    # 1 and 2: the caught saves' (empty) versions.
    assert sorted(p.name for p in (root / "numbers").iterdir()) == ["1", "2"]


def test_verbose_shows_the_traceback_of_a_user_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--verbose", "export", str(tmp_path), "--name", "x"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "Traceback" in err and "FileNotFoundError" in err
    assert err.splitlines()[-1].startswith(ERROR_PREFIX + f"{tmp_path} is not a run directory")


def test_no_tensorflow_log_on_stderr(tmp_path):
    """A real process through the console script's entry point: TensorFlow loads, the
    command fails as a user error, and stderr holds that one line and none of
    TensorFlow's C++ start-up log."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(REPO)
    # oneDNN's kernels on where the CPU has them, so that their notice must be kept quiet
    # too (`translate` would otherwise choose Eigen's).
    env[launcher.KERNELS_VARIABLE] = "1"
    missing = tmp_path / "no_model"
    run = subprocess.run(
        [sys.executable, "-m", "keras_transformer_launcher", "translate", "--model", str(missing)]
        + ["x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert not TF_LOG_LINE.search(run.stderr), run.stderr
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith(ERROR_PREFIX + f"No SavedModel at {missing}"), run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr


# Runs `keras-transformer ARGS` through the launcher in a fresh interpreter and reports
# whether the library or TensorFlow was imported to answer it.
HELP_PROCESS = r"""
import json, sys
import keras_transformer_launcher
sys.argv = ["keras-transformer", *sys.argv[1:]]
try:
    keras_transformer_launcher.main()
except SystemExit as exit:
    status = exit.code
loaded = [name for name in ("keras_transformer", "tensorflow", "keras") if name in sys.modules]
print(json.dumps({"status": status, "loaded": loaded}), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["--help"], ["-h"], [], ["--verbose"]])
def test_the_command_list_is_answered_without_loading_the_library(argv):
    """`keras-transformer --help` (and the usage error of no command) imports neither the
    package nor TensorFlow: it answers in milliseconds, not the seconds TensorFlow takes."""
    run = subprocess.run(
        [sys.executable, "-c", HELP_PROCESS, *argv],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(run.stderr.strip().splitlines()[-1])
    assert report["loaded"] == []
    assert report["status"] == (0 if argv and argv[0] in ("-h", "--help") else 2)
    listed = run.stdout if report["status"] == 0 else run.stderr
    for name in commands.COMMANDS:
        assert name in listed


def test_the_launcher_lists_the_commands_the_library_parses():
    """The launcher's list (names and help) is the full parser's."""
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {action.dest: action.help for action in subparsers._choices_actions}
    assert helps == commands.COMMANDS


@pytest.mark.parametrize(
    "argv, chosen",
    [
        (["translate", "--model", "m", "x"], "0"),
        (["--verbose", "evaluate", "--model", "m"], "0"),
        (["train", "--run-dir", "r"], None),
        (["demo"], None),
        (["export", "r", "--name", "n"], None),
        (["import", "checkpoint", "--run-dir", "r"], "0"),
        (["import-marian", "checkpoint", "--run-dir", "r"], "0"),
    ],
)
def test_commands_that_only_decode_or_import_run_on_eigen_kernels(argv, chosen):
    """`translate` and `evaluate` of a small model (here: no export) ask TensorFlow for its
    Eigen CPU kernels, which decode it faster than oneDNN's, and an import for them too
    (oneDNN's allocator keeps what the copies of weights took); training keeps
    TensorFlow's default."""
    environ = {}
    launcher._choose_kernels(argv, environ)
    assert environ.get(launcher.KERNELS_VARIABLE) == chosen
    mine = {launcher.KERNELS_VARIABLE: "1"}  # the user's choice is kept
    launcher._choose_kernels(argv, mine)
    assert mine == {launcher.KERNELS_VARIABLE: "1"}


def test_exports_of_base_size_keep_the_default_kernels(tmp_path):
    """An export whose variables take `LARGE_EXPORT_BYTES` or more (a base-size model,
    which decodes at least as fast on oneDNN's kernels) keeps TensorFlow's default, named
    by its directory, a version of it, or `--model=`; a smaller one runs on Eigen's."""

    def variables(version: Path, size: int) -> None:
        data = version / "variables" / "variables.data-00000-of-00001"
        data.parent.mkdir(parents=True)
        with open(data, "wb") as file:
            file.truncate(size)  # sparse: no disk written

    large, small = tmp_path / "marian", tmp_path / "numbers"
    variables(large / "1", 1000)
    variables(large / "2", launcher.LARGE_EXPORT_BYTES)
    variables(small / "1", launcher.LARGE_EXPORT_BYTES - 1)
    for argv, chosen in (
        (["translate", "--model", str(large), "x"], None),
        (["evaluate", f"--model={large / '2'}", "--src", "s", "--ref", "r"], None),
        (["translate", "--model", str(small), "x"], "0"),
        (["translate", "--model", str(tmp_path / "absent"), "x"], "0"),
    ):
        environ = {}
        launcher._choose_kernels(argv, environ)
        assert environ.get(launcher.KERNELS_VARIABLE) == chosen, argv


def test_bfloat16_exports_of_any_size_keep_the_default_kernels(tmp_path):
    """A small export that computes in bfloat16 (its EXPORT_INFO_FILE says so) keeps
    TensorFlow's default kernels: Eigen's emulate bfloat16 products."""
    small = tmp_path / "numbers"
    for version, dtype in (("1", "float32"), ("2", "bfloat16")):
        info = small / version / commands.EXPORT_INFO_FILE
        info.parent.mkdir(parents=True)
        info.write_text(json.dumps({"compute_dtype": dtype}))
    for model, chosen in ((small, None), (small / "2", None), (small / "1", "0")):
        environ = {}
        launcher._choose_kernels(["translate", "--model", str(model), "x"], environ)
        assert environ.get(launcher.KERNELS_VARIABLE) == chosen, model
    assert commands.export_compute_dtype(small / "1") == "float32"
    assert commands.export_compute_dtype(tmp_path) == "float32"  # made before the file
    # A record that is not one is an error naming the file; the launcher then keeps
    # the small export's rule and leaves the error to the command.
    broken = tmp_path / "broken"
    for text in ("{", "{}", "[1]"):
        info = broken / "1" / commands.EXPORT_INFO_FILE
        info.parent.mkdir(parents=True, exist_ok=True)
        info.write_text(text)
        with pytest.raises(ValueError, match=re.escape(str(info))):
            commands.export_compute_dtype(broken / "1")
        environ = {}
        launcher._choose_kernels(["translate", "--model", str(broken), "x"], environ)
        assert environ.get(launcher.KERNELS_VARIABLE) == "0"


def test_the_launcher_chooses_the_kernels_before_tensorflow_loads(monkeypatch):
    """`main` sets the kernel variable before anything imports TensorFlow (which reads
    it once, as it loads), and leaves it alone once TensorFlow is loaded."""
    seen = {}
    # Set, then removed: monkeypatch restores the variable's absence afterwards, so a
    # "0" written by `main` does not reach later tests' training subprocesses.
    monkeypatch.setenv(launcher.KERNELS_VARIABLE, "unset")
    monkeypatch.delenv(launcher.KERNELS_VARIABLE)
    monkeypatch.setattr(
        launcher,
        "_quiet_tensorflow",
        lambda: seen.setdefault("at_import", os.environ.get(launcher.KERNELS_VARIABLE)),
    )
    monkeypatch.setattr(cli, "main", lambda: 0)
    monkeypatch.setattr(sys, "argv", ["keras-transformer", "translate", "--model", "m", "x"])
    monkeypatch.delitem(sys.modules, "tensorflow")
    assert launcher.main() == 0
    assert seen["at_import"] == "0"

    monkeypatch.delenv(launcher.KERNELS_VARIABLE)
    monkeypatch.setitem(sys.modules, "tensorflow", types.ModuleType("tensorflow"))
    seen.clear()
    assert launcher.main() == 0
    assert seen["at_import"] is None  # too late to choose: left as it is


# ----------------------------------------------------------------------------- plot


def test_plot_encoding_and_schedule(tmp_path, capsys):
    encoding, schedule = tmp_path / "encoding.png", tmp_path / "figures" / "schedule.png"
    cli.main(["plot", "encoding", "--length", "64", "--depth", "32", "--out", str(encoding)])
    cli.main(
        ["plot", "schedule", "--warmup-steps", "400", "--steps", "4000", "--out", str(schedule)]
    )
    width, height = png_size(encoding)
    assert 600 < width < 900 and 400 < height < 600
    width, height = png_size(schedule)
    assert 500 < width < 800 and 300 < height < 500
    assert user_error(capsys, ["plot", "encoding", "--depth", "0", "--out", str(encoding)]) == (
        "--depth must be positive, got 0"
    )


def test_plot_attention_and_curves(tiny_run_dir, tmp_path, capsys):
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
    message = user_error(
        capsys, ["plot", "curves", "--run-dir", str(tiny_run_dir), "--out", str(curves)]
    )
    assert message == f"{tiny_run_dir} has no history.json: no finished epoch to plot"
    typo = tmp_path / "rnu"
    message = user_error(capsys, ["plot", "curves", "--run-dir", str(typo), "--out", str(curves)])
    assert message == f"{typo} is not a directory: give a run directory"
    message = user_error(
        capsys,
        ["plot", "attention", "--run-dir", str(run), "x", "--checkpoint", "nope.keras",
         "--out", str(attention)],
    )  # fmt: skip
    assert message.startswith(f"No checkpoint at {run / 'nope.keras'}")


# ----------------------------------------------------------------------------- train settings


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
    config = cli.config_from_args(args)
    assert (config.d_model, config.num_heads, config.epochs) == (32, 2, 3)
    assert config.corpus == "files" and config.batch_tokens == 512 and config.lower_case is False
    assert config.dff == TrainConfig().dff
    path.write_text(json.dumps({"d_modl": 32}))
    with pytest.raises(ValueError, match="d_modl"):
        TrainConfig.from_file(path)
    with pytest.raises(ValueError, match="mixed_precision"):
        TrainConfig(mixed_precision="half").validate()


def test_train_user_errors(tmp_path, capsys):
    run = ["train", "--run-dir", str(tmp_path / "run")]
    missing = tmp_path / "missing.pt"
    target = write_lines(tmp_path / "train.en", ["one"])
    message = user_error(capsys, run + ["--src", str(missing), "--tgt", str(target)])
    assert message == f"{missing}: No such file or directory"

    not_json = tmp_path / "settings.json"
    not_json.write_text("{epochs: 3}")
    message = user_error(capsys, run + ["--config", str(not_json)])
    assert message.startswith(f"Config file {not_json} is not valid JSON")
    latin_1 = tmp_path / "latin_1.json"
    latin_1.write_bytes(b'{"src": "caf\xe9.txt"}')
    message = user_error(capsys, run + ["--config", str(latin_1)])
    assert message.startswith(f"Config file {latin_1} is not valid JSON")
    message = user_error(capsys, run + ["--config", str(tmp_path / "none.json")])
    assert message.startswith(f"Config file {tmp_path / 'none.json'} cannot be read")
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"d_modl": 32}))
    assert user_error(capsys, run + ["--config", str(unknown)]).startswith(
        "Unknown training settings: ['d_modl']"
    )
    wrong_type = tmp_path / "wrong_type.json"
    wrong_type.write_text(json.dumps({"epochs": "x"}))
    assert user_error(capsys, run + ["--config", str(wrong_type)]) == (
        "Setting epochs must be of type int. Received: epochs='x'"
    )

    assert user_error(capsys, run + ["--d-model", "0"]) == (
        "d_model must be positive. Received: d_model=0"
    )
    assert "needs both src and tgt" in user_error(capsys, run + ["--corpus", "files"])
    # The demo's export name is checked before it trains, not after.
    demo = ["demo", "--run-dir", str(tmp_path / "demo_run"), "--name", "a/b"]
    assert user_error(capsys, demo).startswith("`name` must be a plain directory name")
    assert not (tmp_path / "demo_run").exists()
    # A flag's own type is argparse's to check, in argparse's form.
    with pytest.raises(SystemExit) as exit_info:
        cli.main(run + ["--lower-case", "maybe"])
    assert exit_info.value.code == 2
    assert "keras-transformer train: error: argument --lower-case" in capsys.readouterr().err


def test_every_setting_has_a_help_with_its_default():
    helps = cli.setting_help()
    fields = dataclasses.fields(TrainConfig)
    assert set(helps) == {field.name for field in fields}
    for field in fields:
        text = helps[field.name]
        assert len(text) > 20 and "default: None" not in text, (field.name, text)
        if field.default is None:
            assert "unset" in text, (field.name, text)  # what unset means
        else:
            shown = str(field.default).lower() if isinstance(field.default, bool) else field.default
            assert text.endswith(f"(default: {shown})"), (field.name, text)
    # The demo's flags show the demo's defaults.
    from keras_transformer.demo import DEMO_SETTINGS

    assert cli.setting_help(DEMO_SETTINGS)["epochs"].endswith(
        f"(default: {DEMO_SETTINGS['epochs']})"
    )


def _parsers(parser, name):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_every_flag_says_what_it_does_and_its_default(capsys):
    parsers = dict(_parsers(cli.build_parser(), "keras-transformer"))
    assert {"keras-transformer train", "keras-transformer plot curves"} <= set(parsers)
    for name, parser in parsers.items():
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            flag = f"{name} {action.option_strings[0]}"
            assert action.help and "default: None" not in action.help, flag
            if action.nargs != 0 and not action.required:  # a flag that takes a value
                assert "default: " in action.help or "unset" in action.help, flag
    for name in parsers:
        with pytest.raises(SystemExit) as exit_info:
            cli.main([*name.split()[1:], "--help"])
        assert exit_info.value.code == 0
        shown = capsys.readouterr().out
        assert shown.startswith("usage: " + name) and "default: None" not in shown, name


# ----------------------------------------------------------------------------- demo


def test_the_demo_trains_and_exports_where_its_flags_say(tmp_path, monkeypatch):
    """`--run-dir`, `--export-root` and `--name` reach the demo's training and export (its
    whole run, at the defaults, is docs/getting-started.md's tiny demo: test_docs.py)."""
    from keras_transformer import demo

    class Stop(Exception):
        pass

    calls = {}

    def train(config, run_dir, verbose):
        calls["train"] = run_dir

    def export_run(run_dir, export_root, name):
        calls["export"] = (run_dir, export_root, name)
        raise Stop  # what follows the export is the guide's run

    monkeypatch.setattr(demo, "train", train)
    monkeypatch.setattr(demo, "export_run", export_run)
    run, root = str(tmp_path / "run"), str(tmp_path / "models")
    with pytest.raises(Stop):
        cli.main(["demo", "--run-dir", run, "--export-root", root, "--name", "numbers"])
    assert calls == {"train": run, "export": (run, root, "numbers")}
