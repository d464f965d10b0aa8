"""Corpora readers: the built-in corpus, text files, TSV, tfds, and hostile files."""

import logging
import time

import pytest

from keras_transformer.text import corpora, data
from keras_transformer.training.config import TrainConfig


def test_demo_corpus_is_deterministic_distinct_and_bilingual():
    pairs = corpora.demo_corpus(num_pairs=300, seed=3)
    assert pairs == corpora.demo_corpus(num_pairs=300, seed=3)
    assert pairs != corpora.demo_corpus(num_pairs=300, seed=4)
    assert len(pairs) == len(set(pairs)) == 300
    assert all(src and tgt for src, tgt in pairs)
    assert sum(src != tgt for src, tgt in pairs) >= 299  # only "zero" reads the same
    german = dict(corpora.demo_corpus(num_pairs=50, seed=3, target_lang="de"))
    assert set(german) == {src for src, _ in pairs[:50]}
    with pytest.raises(ValueError, match="num_pairs"):
        corpora.demo_corpus(num_pairs=0)
    with pytest.raises(ValueError, match="num2words has no language 'xx'"):
        corpora.demo_corpus(num_pairs=10, target_lang="xx")
    config = TrainConfig(demo_languages="en")
    with pytest.raises(ValueError, match="two num2words language codes"):
        corpora.load_corpus(config)


def _write(path, lines: list[bytes]):
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def test_misaligned_files_are_rejected_naming_both_files_and_counts(tmp_path):
    src = _write(tmp_path / "train.pt", [b"um", b"dois", b"tr\xc3\xaas"])
    tgt = _write(tmp_path / "train.en", [b"one", b"two"])
    with pytest.raises(ValueError) as error:
        corpora.read_parallel_files(src, tgt)
    message = str(error.value)
    assert str(src) in message and str(tgt) in message
    assert "3 lines" in message and "2 lines" in message


def test_empty_and_undecodable_lines_are_skipped_as_pairs_and_reported(tmp_path, caplog):
    src = _write(tmp_path / "s", [b"um", b"", b"tr\xc3\xaas", b"\xff quatro", b"cinco\r"])
    tgt = _write(tmp_path / "t", [b"one", b"two", b"  ", b"four", b"five"])
    with caplog.at_level(logging.WARNING, logger="keras_transformer.text.corpora"):
        pairs = corpora.read_parallel_files(src, tgt)
    # Every kept pair is still aligned (no shift after a skipped line).
    assert pairs == [("um", "one"), ("cinco", "five")]
    report = caplog.text
    assert "skipped 3 of 5 lines" in report
    assert "empty source (line 2)" in report and "empty target (line 3)" in report
    assert "undecodable UTF-8 in source (line 4)" in report
    with pytest.raises(ValueError, match="line 2: empty source"):
        corpora.read_parallel_files(src, tgt, on_error="raise")


def test_unicode_line_separators_inside_a_sentence_do_not_split_it(tmp_path):
    src = _write(tmp_path / "s", ["a\u2028b".encode(), "c\x85d".encode(), b"e"])
    tgt = _write(tmp_path / "t", [b"1", b"2", b"3"])
    assert [t for _, t in corpora.read_parallel_files(src, tgt)] == ["1", "2", "3"]


def test_read_tsv(tmp_path, caplog):
    path = _write(tmp_path / "c.tsv", [b"um\tone", b"no tab", b"a\tb\tc", "três\tthree".encode()])
    with caplog.at_level(logging.WARNING, logger="keras_transformer.text.corpora"):
        assert corpora.read_tsv(path) == [("um", "one"), ("três", "three")]
    assert "skipped 2 of 4 lines" in caplog.text


def test_load_tfds_offline_fails_fast_naming_local_files(tmp_path, monkeypatch):
    monkeypatch.setattr(corpora, "_can_reach", lambda *args, **kwargs: False)
    start = time.perf_counter()
    # A ConnectionError, an OSError: the command line reports it in one line.
    with pytest.raises(ConnectionError) as error:
        corpora.load_tfds(split="train", data_dir=str(tmp_path))
    assert time.perf_counter() - start < 30
    assert "--src" in str(error.value) and "--tgt" in str(error.value)


# ----------------------------------------------------------------------------- hostile corpora
# Each case has one clear outcome: the pairs as meant, a counted skip, or an
# error naming the file and the problem; never a shifted pair.


def test_crlf_endings_a_byte_order_mark_and_a_last_line_without_newline(tmp_path):
    src = tmp_path / "s"
    src.write_bytes(b"\xef\xbb\xbfum\r\ndois\r\ntr\xc3\xaas")  # BOM, CRLF, no final newline
    tgt = _write(tmp_path / "t", [b"\xef\xbb\xbfone", b"two", b"three"])
    assert corpora.read_parallel_files(src, tgt) == [
        ("um", "one"),
        ("dois", "two"),
        ("três", "three"),
    ]
    tsv = tmp_path / "c.tsv"
    tsv.write_bytes(b"\xef\xbb\xbfum\tone\r\ndois\ttwo")
    assert corpora.read_tsv(tsv) == [("um", "one"), ("dois", "two")]


def test_a_carriage_return_inside_a_line_does_not_split_it(tmp_path):
    # Equal line counts, but a reader with universal newlines would see 4 source
    # lines and shift every pair after the second.
    src = _write(tmp_path / "s", [b"um", b"dois\rdois e meio", b"tr\xc3\xaas"])
    tgt = _write(tmp_path / "t", [b"one", b"two", b"three"])
    pairs = corpora.read_parallel_files(src, tgt)
    assert [t for _, t in pairs] == ["one", "two", "three"]
    assert pairs[1][0] == "dois\rdois e meio"


def test_nul_bytes_and_latin_1_lines_are_counted_skips(tmp_path, caplog):
    src = _write(tmp_path / "s", [b"um", b"d\x00ois", b"tr\xeas", b"quatro"])  # Latin-1 "três"
    tgt = _write(tmp_path / "t", [b"one", b"two", b"three", b"fo\x00ur"])
    with caplog.at_level(logging.WARNING, logger="keras_transformer.text.corpora"):
        assert corpora.read_parallel_files(src, tgt) == [("um", "one")]
    assert "skipped 3 of 4 lines" in caplog.text
    assert "NUL bytes in source (line 2)" in caplog.text
    assert "undecodable UTF-8 in source (line 3)" in caplog.text
    assert "NUL bytes in target (line 4)" in caplog.text
    with pytest.raises(ValueError, match=r"line 2: NUL bytes in source"):
        corpora.read_parallel_files(src, tgt, on_error="raise")


def test_empty_files_are_an_error_naming_them(tmp_path):
    src, tgt = _write(tmp_path / "s", []), _write(tmp_path / "t", [])
    with pytest.raises(ValueError, match=f"{src} / {tgt}: no sentence pairs \\(no lines\\)"):
        corpora.read_parallel_files(src, tgt)
    with pytest.raises(ValueError, match=r"has 0 lines but .* has 1 lines"):
        corpora.read_parallel_files(src, _write(tmp_path / "one", [b"one"]))
    blank = _write(tmp_path / "blank", [b"  ", b""])
    with pytest.raises(ValueError, match=r"no sentence pairs \(all 2 lines were skipped\)"):
        corpora.read_parallel_files(blank, blank)
    with pytest.raises(ValueError, match=f"{src}: no sentence pairs"):
        corpora.read_tsv(src)


def test_a_1_mb_line_is_kept_and_cut_to_max_tokens(tmp_path, demo_tokenizers):
    long_line = b" ".join([b"one"] * 250_000)  # about 1 MB
    src = _write(tmp_path / "s", [b"two", long_line, b"three"])
    tgt = _write(tmp_path / "t", [b"2", b"1", b"3"])
    pairs = corpora.read_parallel_files(src, tgt)
    assert [t for _, t in pairs] == ["2", "1", "3"] and len(pairs[1][0]) == len(long_line)
    batches = list(data.make_batches(pairs, *demo_tokenizers, max_tokens=8, shuffle=False))
    assert sum(len(c) for (c, _), _ in batches) == 3
    assert all(c.shape[1] <= 8 for (c, _), _ in batches)


@pytest.mark.slow
def test_training_on_a_hostile_corpus_runs_through(tmp_path):
    from keras_transformer import training
    from tests.test_training import TINY

    pairs = corpora.demo_corpus(200, seed=2)
    hostile_src = [b"\x00\x01binary", b"tr\xeas", b" ".join([b"one"] * 250_000), b"a\rb"]
    hostile_tgt = [b"x", b"three", b"um", b"a b"]
    src = tmp_path / "train.en"
    tgt = tmp_path / "train.pt"
    src.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join([s.encode() for s, _ in pairs] + hostile_src))
    tgt.write_bytes(b"\n".join([t.encode() for _, t in pairs] + hostile_tgt))
    config = {**TINY, "corpus": "files", "src": str(src), "tgt": str(tgt), "epochs": 1}
    history = training.train(config, tmp_path / "run", verbose=0)
    assert len(history.history["loss"]) == 1


def test_the_command_line_reports_a_corpus_problem_in_one_line(tmp_path, capsys):
    from tests.test_cli import user_error

    src, tgt = _write(tmp_path / "s", []), _write(tmp_path / "t", [])
    run = ["train", "--run-dir", str(tmp_path / "run"), "--src", str(src), "--tgt", str(tgt)]
    assert user_error(capsys, run) == f"{src} / {tgt}: no sentence pairs (no lines)."
    assert not (tmp_path / "run").exists()
