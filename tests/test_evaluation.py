"""BLEU/chrF through the evaluate path."""

import json
from pathlib import Path

import pytest

from keras_transformer import evaluation

REFERENCES = [
    "the cat sat on the mat .",
    "there is a dog in the garden , and it is barking .",
    "we went home early because it was raining .",
]


def identity(batch):
    return list(batch)


def test_perfect_hypotheses_score_100(tmp_path):
    result = evaluation.evaluate(
        identity, REFERENCES, REFERENCES, tokenize="none", output_dir=tmp_path, progress=False
    )
    assert result["bleu"] == 100.0
    assert result["chrf"] == 100.0
    assert (tmp_path / "translations.txt").read_text().splitlines() == REFERENCES
    assert json.loads((tmp_path / "scores.json").read_text())["bleu"] == 100.0


def test_metadata_is_recorded_beside_the_scores_and_may_not_replace_them(tmp_path):
    metadata = {"model": "saved_models/en_de/3", "search": "beam 5"}
    result = evaluation.evaluate(
        identity, REFERENCES, REFERENCES, output_dir=tmp_path, progress=False, metadata=metadata
    )
    recorded = json.loads((tmp_path / "scores.json").read_text())
    assert result["bleu"] == recorded["bleu"] == 100.0
    assert recorded["model"] == result["model"] == "saved_models/en_de/3"
    assert recorded["search"] == "beam 5"
    # RESULT_FIELDS names every field evaluate writes itself.
    assert set(result) - set(metadata) == set(evaluation.RESULT_FIELDS)

    translated = []

    def spy(batch):
        translated.append(batch)
        return batch

    # Refused before any sentence is translated, not after.
    with pytest.raises(ValueError, match=r"replace the scores' own fields: \['bleu'\]"):
        evaluation.evaluate(spy, REFERENCES, REFERENCES, progress=False, metadata={"bleu": 99})
    with pytest.raises(ValueError, match="JSON-serializable"):
        evaluation.evaluate(spy, REFERENCES, REFERENCES, progress=False, metadata={"x": object()})
    assert translated == []


def test_empty_hypotheses_score_0():
    result = evaluation.evaluate(
        lambda batch: [""] * len(batch), REFERENCES, REFERENCES, progress=False
    )
    assert result["bleu"] == 0.0
    assert result["chrf"] == 0.0


def test_tokenization_setting_is_honoured():
    hypotheses = ["the cat sat on the mat."]  # untokenized final period
    references = ["the cat sat on the mat ."]
    raw = evaluation.score(hypotheses, references, tokenize="13a")
    pretokenized = evaluation.score(hypotheses, references, tokenize="none")
    assert raw["bleu"] == 100.0  # 13a splits "mat." into "mat ."
    assert pretokenized["bleu"] < 100.0  # "mat." is one token that matches nothing
    assert "tok:none" in pretokenized["bleu_signature"]
    assert "tok:13a" in raw["bleu_signature"]


def test_sources_and_references_are_read_from_files_in_batches(tmp_path):
    src, ref = tmp_path / "test.src", tmp_path / "test.ref"
    src.write_text("".join(line + "\n" for line in REFERENCES), encoding="utf-8")
    ref.write_text("".join(line.upper() + "\n" for line in REFERENCES), encoding="utf-8")
    seen_batches = []

    def translate(batch):
        seen_batches.append(len(batch))
        return batch

    result = evaluation.evaluate(translate, src, ref, lowercase=True, batch_size=2, progress=False)
    assert seen_batches == [2, 1]
    assert result["bleu"] == 100.0
    assert "BLEU 100.00" in evaluation.summary_line(result)


def test_misaligned_inputs_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="3 lines but the reference has 2"):
        evaluation.evaluate(identity, REFERENCES, REFERENCES[:2], progress=False)
    with pytest.raises(ValueError, match="exactly one reference"):
        evaluation.score(["a"], ["a", "b"])
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"caf\xe9\n")
    with pytest.raises(ValueError, match="not valid UTF-8"):
        evaluation.read_lines(bad)
    # Lines end at "\n" only (CRLF too): a "\r" inside a line does not split it and
    # shift every later line against its reference; a byte-order mark is no text.
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes("\ufeffone\rtwo\r\nthree\u2028\n".encode("utf-8"))
    assert evaluation.read_lines(crlf) == ["one\rtwo", "three\u2028"]


def test_scores_an_exported_saved_model(tiny_export):
    export_dir = tiny_export.path
    sources = ["three one four", "one five nine two"]
    result = evaluation.evaluate(
        export_dir.parent, sources, ["3 1 4", "1 5 9 2"], tokenize="none", progress=False
    )
    assert result["bleu"] > 50  # the tiny model has learned the mapping
    beam = evaluation.evaluate(
        export_dir.parent, sources, ["3 1 4", "1 5 9 2"], beam_width=2, progress=False
    )
    assert beam["sentences"] == 2


def test_moses_form_matches_the_published_tokenized_references():
    # Lines as Multi30k's raw and tok/ files hold them: lowercased, punctuation
    # normalized, tokenized, quotes and apostrophes escaped.
    raw = ['Ein Mann im blau-grünen Hemd sagt: "Das ist\u2019s!"', "A dog's ball, 2.5 m away."]
    assert evaluation.moses_form(raw[:1], "de") == [
        "ein mann im blau-grünen hemd sagt : &quot; das ist &apos; s ! &quot;"
    ]
    assert evaluation.moses_form(raw[1:], "en") == ["a dog &apos;s ball , 2.5 m away ."]
    assert evaluation.moses_form(["Ein Hund."], "de", lowercase=False) == ["Ein Hund ."]


def test_evaluate_scores_cased_output_against_moses_form_references(tmp_path):
    references = ["ein hund , der &quot; hallo &quot; sagt .", "zwei männer ."]
    output = ['Ein Hund, der "Hallo" sagt.', "Zwei Männer."]
    result = evaluation.evaluate(
        lambda batch: output[: len(batch)] if batch[0] == "a" else output[1:],
        ["a", "b"],
        references,
        tokenize="none",
        moses_lang="de",
        batch_size=2,
        output_dir=tmp_path,
        progress=False,
    )
    assert result["bleu"] == 100.0
    # The translations file keeps what the model wrote.
    assert (tmp_path / "translations.txt").read_text(encoding="utf-8").splitlines() == output
    with pytest.raises(ValueError, match='tokenize="none"'):
        evaluation.evaluate(lambda b: b, ["x"], ["x"], moses_lang="de", progress=False)


def test_cli_default_output_dir_keeps_each_evaluation(tmp_path, monkeypatch, capsys):
    """`evaluate --model saved_models/demo/1/ --src A --ref B`, then with another test
    set or search: each evaluation gets its own default directory, keyed by the model, the
    test files and the search, and the earlier results stay. The translation is patched
    (each source as it is): what is tested is where the results go."""
    from keras_transformer import cli

    calls = []

    def translate_fn(model, beam_width=None, source_language=None, target_language=None):
        calls.append((model, beam_width))
        return identity

    monkeypatch.setattr(evaluation, "saved_model_translate_fn", translate_fn)
    monkeypatch.chdir(tmp_path)
    for name, lines in (("a.en", REFERENCES), ("b.en", REFERENCES[:2])):
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    (elsewhere / "a.en").write_text(REFERENCES[2] + "\n", encoding="utf-8")

    def run(*files, more=()):
        src, ref = files
        argv = ["evaluate", "--model", "saved_models/demo/1/", "--src", src, "--ref", ref]
        assert cli.main([*argv, "--no-progress", *more]) == 0
        result = json.loads(capsys.readouterr().out)
        path = Path(result["translations_file"]).parent
        assert json.loads((path / "scores.json").read_text())["src"] == src
        return path, (path / "scores.json").read_text()

    first, first_scores = run("a.en", "a.en")
    assert first == Path("evaluations/demo/a.en-a.en-greedy")
    second, _ = run("b.en", "b.en")
    assert second == Path("evaluations/demo/b.en-b.en-greedy")
    beam, _ = run("a.en", "a.en", more=["--beam", "2"])
    assert beam == Path("evaluations/demo/a.en-a.en-beam2")
    # Test files of the same names elsewhere: beside the first, not over it.
    same_names, _ = run("other/a.en", "other/a.en")
    assert same_names == Path("evaluations/demo/a.en-a.en-greedy-2")
    assert (first / "scores.json").read_text() == first_scores
    # The first evaluation again takes its own directory.
    again, _ = run("a.en", "a.en")
    assert again == first and not Path("evaluations/demo/a.en-a.en-greedy-3").exists()
    assert calls[2] == ("saved_models/demo/1/", 2)
