"""Files written whole or not at all (`atomic.py`)."""

import pytest

from keras_transformer import atomic
from keras_transformer.text.tokenizers import read_vocabulary, write_vocabulary


class Killed(Exception):
    """Stands for the process dying mid-write."""


def test_a_writer_that_dies_mid_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "history.json"
    path.write_text("old\n")

    def half_then_die(partial):
        partial.write_text("ne")
        raise Killed

    with pytest.raises(Killed):
        atomic.write_atomically(path, half_then_die)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.json"]
    atomic.write_atomically(path, lambda partial: partial.write_text("new\n"))
    assert path.read_text() == "new\n"


def test_the_temporary_name_keeps_the_ending_writers_choose_their_format_by(tmp_path):
    seen = []

    def write(partial):
        seen.append(partial.name)
        partial.write_bytes(b"weights")

    atomic.write_atomically(tmp_path / "epoch_0001.weights.h5", write)
    assert seen == [".partial.epoch_0001.weights.h5"]
    assert (tmp_path / "epoch_0001.weights.h5").read_bytes() == b"weights"


def test_partial_files_that_a_kill_left_are_removed(tmp_path):
    (tmp_path / ".partial.last.keras").write_bytes(b"PK\x03\x04 half")
    (tmp_path / "last.keras").write_bytes(b"whole")
    removed = atomic.remove_partial_files(tmp_path, tmp_path / "missing")
    assert [p.name for p in removed] == [".partial.last.keras"]
    assert [p.name for p in tmp_path.iterdir()] == ["last.keras"]


def test_a_vocabulary_killed_mid_write_is_not_left_half_written(tmp_path, monkeypatch):
    path = tmp_path / "vocab_source.txt"
    write_vocabulary(["[PAD]", "[UNK]", "[START]", "[END]", "one"], path)
    original = type(path).write_text

    def die_after_half(self, text, **kwargs):
        original(self, text[: len(text) // 2], **kwargs)
        raise Killed

    monkeypatch.setattr(type(path), "write_text", die_after_half)
    with pytest.raises(Killed):
        write_vocabulary(["[PAD]", "[UNK]", "[START]", "[END]", "two", "three"], path)
    monkeypatch.undo()
    assert read_vocabulary(path)[-1] == "one"
