"""Corpora readers and the batching pipeline."""

import logging
import time
import warnings

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import data
from keras_transformer.constants import END_ID, START_ID


def test_demo_corpus_is_deterministic_distinct_and_bilingual():
    pairs = data.demo_corpus(num_pairs=300, seed=3)
    assert pairs == data.demo_corpus(num_pairs=300, seed=3)
    assert pairs != data.demo_corpus(num_pairs=300, seed=4)
    assert len(pairs) == len(set(pairs)) == 300
    assert all(src and tgt for src, tgt in pairs)
    assert sum(src != tgt for src, tgt in pairs) >= 299  # only "zero" reads the same
    german = dict(data.demo_corpus(num_pairs=50, seed=3, target_lang="de"))
    assert set(german) == {src for src, _ in pairs[:50]}
    with pytest.raises(ValueError, match="num_pairs"):
        data.demo_corpus(num_pairs=0)


def _write(path, lines: list[bytes]):
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def test_misaligned_files_are_rejected_naming_both_files_and_counts(tmp_path):
    src = _write(tmp_path / "train.pt", [b"um", b"dois", b"tr\xc3\xaas"])
    tgt = _write(tmp_path / "train.en", [b"one", b"two"])
    with pytest.raises(ValueError) as error:
        data.read_parallel_files(src, tgt)
    message = str(error.value)
    assert str(src) in message and str(tgt) in message
    assert "3 lines" in message and "2 lines" in message


def test_empty_and_undecodable_lines_are_skipped_as_pairs_and_reported(tmp_path, caplog):
    src = _write(tmp_path / "s", [b"um", b"", b"tr\xc3\xaas", b"\xff quatro", b"cinco\r"])
    tgt = _write(tmp_path / "t", [b"one", b"two", b"  ", b"four", b"five"])
    with caplog.at_level(logging.WARNING, logger="keras_transformer.data"):
        pairs = data.read_parallel_files(src, tgt)
    # Every kept pair is still aligned (no shift after a skipped line).
    assert pairs == [("um", "one"), ("cinco", "five")]
    report = caplog.text
    assert "skipped 3 of 5 lines" in report
    assert "empty source (line 2)" in report and "empty target (line 3)" in report
    assert "undecodable UTF-8 in source (line 4)" in report
    with pytest.raises(ValueError, match="line 2: empty source"):
        data.read_parallel_files(src, tgt, on_error="raise")


def test_unicode_line_separators_inside_a_sentence_do_not_split_it(tmp_path):
    src = _write(tmp_path / "s", ["a\u2028b".encode(), "c\x85d".encode(), b"e"])
    tgt = _write(tmp_path / "t", [b"1", b"2", b"3"])
    assert [t for _, t in data.read_parallel_files(src, tgt)] == ["1", "2", "3"]


def test_read_tsv(tmp_path, caplog):
    path = _write(tmp_path / "c.tsv", [b"um\tone", b"no tab", b"a\tb\tc", "três\tthree".encode()])
    with caplog.at_level(logging.WARNING, logger="keras_transformer.data"):
        assert data.read_tsv(path) == [("um", "one"), ("três", "three")]
    assert "skipped 2 of 4 lines" in caplog.text


def test_load_tfds_offline_fails_fast_naming_local_files(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "_can_reach", lambda *args, **kwargs: False)
    start = time.perf_counter()
    with pytest.raises(RuntimeError) as error:
        data.load_tfds(split="train", data_dir=str(tmp_path))
    assert time.perf_counter() - start < 30
    assert "--src" in str(error.value) and "--tgt" in str(error.value)


def _batches(pairs, tokenizers, **kwargs):
    return list(data.make_batches(pairs, *tokenizers, **kwargs))


def test_batches_are_shifted_targets_padded_with_zero(demo_pairs, demo_tokenizers):
    batches = _batches(demo_pairs, demo_tokenizers, batch_size=32, shuffle=False)
    rows = 0
    for (context, target_in), target_out in batches:
        assert context.dtype == target_in.dtype == target_out.dtype == tf.int64
        assert target_in.shape == target_out.shape and context.shape[0] == target_in.shape[0]
        context, target_in, target_out = context.numpy(), target_in.numpy(), target_out.numpy()
        assert (target_in[:, 0] == START_ID).all() and (context[:, 0] == START_ID).all()
        # target_out is target_in shifted left by one, ending in END.
        np.testing.assert_array_equal(target_in[:, 1:], target_out[:, :-1] * (target_in[:, 1:] > 0))
        lengths = (target_out > 0).sum(axis=1)
        assert (target_out[np.arange(len(lengths)), lengths - 1] == END_ID).all()
        # Padding is 0 and only at the end of a row.
        for ids in (context, target_out):
            real = ids > 0
            assert (np.sort(real, axis=1)[:, ::-1] == real).all()
        rows += len(context)
    assert rows == len(demo_pairs)


def test_batches_are_length_bucketed(demo_pairs, demo_tokenizers):
    lengths = data.bucket_boundaries(48)
    batches = _batches(demo_pairs, demo_tokenizers, batch_size=16, max_tokens=48)
    padded = real = 0
    shapes = set()
    for (context, _), target_out in batches:
        width = context.shape[1]
        assert target_out.shape[1] == width and width in lengths
        shapes.add(width)
        row_length = np.maximum((context.numpy() > 0).sum(1), (target_out.numpy() > 0).sum(1))
        # Every row belongs to this bucket: longer than the bucket below it.
        smaller = [length for length in lengths if length < width]
        assert (row_length <= width).all() and (row_length > max(smaller, default=0)).all()
        padded += context.shape[0] * width
        real += row_length.sum()
    assert len(shapes) >= 2  # the corpus spans several buckets
    assert real / padded > 0.6  # little compute spent on padding


def test_token_budget_sets_rows_per_bucket(demo_pairs, demo_tokenizers):
    batches = _batches(demo_pairs, demo_tokenizers, batch_tokens=256, shuffle=False)
    for (context, _), _ in batches:
        assert context.shape[0] * context.shape[1] <= 256


def test_overlong_pairs_are_truncated_or_dropped(demo_pairs, demo_tokenizers):
    long = [(s, t) for s, t in demo_pairs if len(s.split()) > 6][:40]
    truncated = _batches(long, demo_tokenizers, max_tokens=6, shuffle=False)
    assert sum(len(c) for (c, _), _ in truncated) == len(long)
    assert all(c.shape[1] <= 6 and t.shape[1] <= 6 for (c, _), t in truncated)
    assert _batches(long, demo_tokenizers, max_tokens=6, overlong="drop") == []
    with pytest.raises(ValueError, match="overlong"):
        data.make_batches(long, *demo_tokenizers, overlong="cut")


@pytest.mark.parametrize(
    "sizes",
    [
        dict(batch_size=32, max_tokens=48),
        dict(batch_tokens=256, max_tokens=48),
        dict(batch_size=16, max_tokens=12, overlong="drop"),
    ],
    ids=["batch_size", "batch_tokens", "drop"],
)
@pytest.mark.parametrize("as_dataset", [False, True], ids=["list", "dataset"])
def test_cardinality_is_the_number_of_batches_of_every_epoch(
    demo_pairs, demo_tokenizers, sizes, as_dataset
):
    pairs = demo_pairs
    if as_dataset:  # as load_tfds gives them
        sources, targets = data.texts(demo_pairs, 0), data.texts(demo_pairs, 1)
        pairs = tf.data.Dataset.from_tensor_slices((sources, targets))
    batches = data.make_batches(pairs, *demo_tokenizers, shuffle=True, seed=0, **sizes)
    expected = int(batches.cardinality())
    first, second = list(batches), list(batches)
    assert expected > 0 and len(first) == len(second) == expected
    # The epochs were shuffled differently, and yet made as many batches.
    assert any(not np.array_equal(a[1], b[1]) for a, b in zip(first, second))


def test_training_knows_its_steps_from_the_first_epoch(tmp_path, capsys):
    from keras_transformer import training

    config = dict(
        demo_pairs=300, val_fraction=0.1, vocab_size=500, vocab_lower_thresh=1, num_layers=1,
        d_model=16, num_heads=2, dff=32, max_tokens=16, batch_size=32, warmup_steps=10, epochs=2,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        training.train(config, tmp_path, verbose=1)
    assert not [w for w in caught if "ran out of data" in str(w.message)]
    progress = capsys.readouterr().out
    # Keras writes "1/Unknown" while a dataset's cardinality is unknown.
    assert "Epoch 1/2" in progress and "Unknown" not in progress


# ----------------------------------------------------------------------------- hostile corpora
# Each case has one clear outcome: the pairs as meant, a counted skip, or an
# error naming the file and the problem; never a shifted pair.


def test_crlf_endings_a_byte_order_mark_and_a_last_line_without_newline(tmp_path):
    src = tmp_path / "s"
    src.write_bytes(b"\xef\xbb\xbfum\r\ndois\r\ntr\xc3\xaas")  # BOM, CRLF, no final newline
    tgt = _write(tmp_path / "t", [b"\xef\xbb\xbfone", b"two", b"three"])
    assert data.read_parallel_files(src, tgt) == [("um", "one"), ("dois", "two"), ("três", "three")]
    tsv = tmp_path / "c.tsv"
    tsv.write_bytes(b"\xef\xbb\xbfum\tone\r\ndois\ttwo")
    assert data.read_tsv(tsv) == [("um", "one"), ("dois", "two")]


def test_a_carriage_return_inside_a_line_does_not_split_it(tmp_path):
    # Equal line counts, but a reader with universal newlines would see 4 source
    # lines and shift every pair after the second.
    src = _write(tmp_path / "s", [b"um", b"dois\rdois e meio", b"tr\xc3\xaas"])
    tgt = _write(tmp_path / "t", [b"one", b"two", b"three"])
    pairs = data.read_parallel_files(src, tgt)
    assert [t for _, t in pairs] == ["one", "two", "three"]
    assert pairs[1][0] == "dois\rdois e meio"


def test_nul_bytes_and_latin_1_lines_are_counted_skips(tmp_path, caplog):
    src = _write(tmp_path / "s", [b"um", b"d\x00ois", b"tr\xeas", b"quatro"])  # Latin-1 "três"
    tgt = _write(tmp_path / "t", [b"one", b"two", b"three", b"fo\x00ur"])
    with caplog.at_level(logging.WARNING, logger="keras_transformer.data"):
        assert data.read_parallel_files(src, tgt) == [("um", "one")]
    assert "skipped 3 of 4 lines" in caplog.text
    assert "NUL bytes in source (line 2)" in caplog.text
    assert "undecodable UTF-8 in source (line 3)" in caplog.text
    assert "NUL bytes in target (line 4)" in caplog.text
    with pytest.raises(ValueError, match=r"line 2: NUL bytes in source"):
        data.read_parallel_files(src, tgt, on_error="raise")


def test_empty_files_are_an_error_naming_them(tmp_path):
    src, tgt = _write(tmp_path / "s", []), _write(tmp_path / "t", [])
    with pytest.raises(ValueError, match=f"{src} / {tgt}: no sentence pairs \\(no lines\\)"):
        data.read_parallel_files(src, tgt)
    with pytest.raises(ValueError, match=r"has 0 lines but .* has 1 lines"):
        data.read_parallel_files(src, _write(tmp_path / "one", [b"one"]))
    blank = _write(tmp_path / "blank", [b"  ", b""])
    with pytest.raises(ValueError, match=r"no sentence pairs \(all 2 lines were skipped\)"):
        data.read_parallel_files(blank, blank)
    with pytest.raises(ValueError, match=f"{src}: no sentence pairs"):
        data.read_tsv(src)


def test_a_1_mb_line_is_kept_and_cut_to_max_tokens(tmp_path, demo_tokenizers):
    long_line = b" ".join([b"one"] * 250_000)  # about 1 MB
    src = _write(tmp_path / "s", [b"two", long_line, b"three"])
    tgt = _write(tmp_path / "t", [b"2", b"1", b"3"])
    pairs = data.read_parallel_files(src, tgt)
    assert [t for _, t in pairs] == ["2", "1", "3"] and len(pairs[1][0]) == len(long_line)
    batches = _batches(pairs, demo_tokenizers, max_tokens=8, shuffle=False)
    assert sum(len(c) for (c, _), _ in batches) == 3
    assert all(c.shape[1] <= 8 for (c, _), _ in batches)


@pytest.mark.slow
def test_training_on_a_hostile_corpus_runs_through(tmp_path):
    from keras_transformer import training
    from tests.test_training import TINY

    pairs = data.demo_corpus(200, seed=2)
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
