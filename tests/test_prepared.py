"""Prepared data: `prepare` writes it once, `PreparedBatches` and `train --data` read it."""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from keras_transformer.cli import main as cli_main
from keras_transformer.text import data, prepared
from keras_transformer.training import prepare, run_dir, train
from tests.helpers import (
    TINY_MODEL,
    TOKENIZER,
    start_workers,
    wait_for_workers,
)

REPO = Path(__file__).resolve().parents[1]


def tokenizers_of(directory):
    return run_dir.make_tokenizers(directory, prepared.PreparedData(directory).tokenizer_settings)


def epoch_rows(batches) -> collections.Counter:
    """Each batch row as (context, target_in, target_out) without padding, counted."""
    rows = collections.Counter()
    for (context, target_in), target_out in batches:
        for c, i, o in zip(np.asarray(context), np.asarray(target_in), np.asarray(target_out)):
            rows[(tuple(c[c != 0]), tuple(i[i != 0]), tuple(o[o != 0]))] += 1
    return rows


# ----------------------------------------------------------------------------- prepare


def test_prepared_ids_decode_to_the_normalized_text(prepared_dir, corpus):
    _, train_pairs, val_pairs = corpus
    source_tokenizer, target_tokenizer = tokenizers_of(prepared_dir)
    data_ = prepared.PreparedData(prepared_dir)
    for split, pairs in (("train", train_pairs), ("validation", val_pairs)):
        pairs_read = data_.split(split)
        assert len(pairs_read) == len(pairs) == data_.pairs(split)
        ids = [pairs_read.pair(i) for i in range(len(pairs_read))]
        for side, tokenizer in ((0, source_tokenizer), (1, target_tokenizer)):
            texts = [pair[side] for pair in pairs]
            expected = tokenizer.tokenize(texts).to_list()
            assert [list(map(int, pair[side])) for pair in ids] == expected
            decoded = tokenizer.detokenize(tokenizer.tokenize(texts)).numpy()
            assert [d.decode() for d in decoded] == texts  # the text is already normal


def test_the_index_counts_equal_the_shards(prepared_dir):
    index = json.loads((prepared_dir / prepared.INDEX_FILE).read_text())
    shards = index["splits"]["train"]["shards"]
    assert [shard["pairs"] for shard in shards] == [250, 250, 199]
    for shard in shards:
        lengths = np.load(prepared.shard_path(prepared_dir, shard["name"], prepared.LENGTHS))
        source = np.load(prepared.shard_path(prepared_dir, shard["name"], prepared.SOURCE_IDS))
        target = np.load(prepared.shard_path(prepared_dir, shard["name"], prepared.TARGET_IDS))
        assert len(lengths) == shard["pairs"]
        assert (lengths[:, 0].sum(), lengths[:, 1].sum()) == (source.size, target.size)
        assert (source.size, target.size) == (shard["source_tokens"], shard["target_tokens"])
        assert source.dtype == np.uint16
        # Every pair is [START] ... [END].
        starts = np.cumsum(lengths[:, 0]) - lengths[:, 0]
        assert (source[starts] == 2).all() and (source[starts + lengths[:, 0] - 1] == 3).all()


def test_a_directory_whose_shards_disagree_with_its_index_is_refused(prepared_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(prepared_dir, copy)
    shard = copy / "train" / "00001.source.npy"
    np.save(shard, np.load(shard)[:-1])
    with pytest.raises(ValueError, match="00001.lengths.npy: the shard holds 250 pairs"):
        prepared.PreparedData(copy)


def test_bad_lines_are_counted_skips_and_misaligned_files_an_error(corpus, tmp_path, caplog):
    settings, kept, _ = corpus
    with caplog.at_level("WARNING"):
        out = prepare.prepare(settings, tmp_path / "a")
    assert "skipped 1 of 700 lines: 1 empty target (line 5)" in caplog.text
    assert prepared.PreparedData(out).pairs("train") == len(kept) == 699
    short = tmp_path / "short.pt"
    short.write_text("Um.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not line-aligned: .* has 700 lines but .* has 1 lines"):
        prepare.prepare({**settings, "tgt": str(short)}, tmp_path / "b")
    assert not (tmp_path / "b").exists()
    assert not prepare.atomic.partial_path(tmp_path / "b").exists()


def test_prepare_holds_out_validation_pairs_and_refuses_an_existing_directory(tmp_path):
    settings = {**TOKENIZER, "corpus": "demo", "demo_pairs": 400, "val_fraction": 0.1}
    out = prepare.prepare(settings, tmp_path / "d")
    data_ = prepared.PreparedData(out)
    assert data_.pairs("train") + data_.pairs("validation") == 400
    assert 20 <= data_.pairs("validation") <= 60
    with pytest.raises(ValueError, match="exists: prepare writes a new directory"):
        prepare.prepare(settings, out)


def test_prepare_takes_the_tokenizer_of_a_prepared_directory(prepared_dir, corpus, tmp_path):
    settings, _, _ = corpus
    other = {**settings, "vocab_size": 500}  # ignored: the tokenizer is taken
    out = prepare.prepare(other, tmp_path / "again", tokenizer_from=prepared_dir)
    assert prepared.PreparedData(out).files == prepared.PreparedData(prepared_dir).files


def test_an_interrupted_prepare_leaves_nothing_train_accepts(tmp_path):
    out = tmp_path / "data"
    partial = prepare.atomic.partial_path(out)
    # 20 shards: the kill, at most 0.05 s after the first shard appears, lands while the
    # other 19 are written (2.5 s on the 2-core machine the suite is timed on). More pairs
    # only lengthen the wait for the first shard: the corpus is made whole before it
    # (200,000 pairs took 41 s to the first shard, 40,000 take 16 s).
    command = [
        sys.executable,
        "-c",
        "import sys; from keras_transformer.cli import main; sys.exit(main())",
        "prepare",
        "--output",
        str(out),
        "--demo-pairs",
        "40000",
        "--shard-pairs",
        "2000",
        "--shared-vocab",
        "true",
        "--vocab-size",
        "300",
        "--tokenizer-sentences",
        "2000",
    ]
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 240
        while not (partial / "train" / "00000.lengths.npy").exists():
            assert process.poll() is None, "prepare ended before its first shard"
            assert time.time() < deadline, "no shard after 240 s"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert partial.is_dir() and not out.exists()
    for directory in (out, partial):
        with pytest.raises(ValueError, match="is not a prepared data directory"):
            prepared.PreparedData(directory)
    with pytest.raises(ValueError, match="is not a prepared data directory"):
        train({**TOKENIZER, **TINY_MODEL, "data": str(out)}, tmp_path / "run")
    # Run again, it starts clean.
    settings = {**TOKENIZER, "corpus": "demo", "demo_pairs": 300}
    prepare.prepare(settings, out)
    assert not partial.exists()
    assert prepared.PreparedData(out).pairs("train") > 0


# ----------------------------------------------------------------------------- batches


@pytest.mark.parametrize(
    "batching",
    [
        {"batch_size": 32, "max_tokens": 128, "overlong": "truncate"},
        {"batch_size": 16, "max_tokens": 12, "overlong": "truncate"},
        {"batch_size": 16, "max_tokens": 12, "overlong": "drop"},
        {"batch_tokens": 400, "max_tokens": 40, "overlong": "truncate"},
    ],
)
def test_batches_from_prepared_data_hold_the_text_pipelines_pairs(prepared_dir, corpus, batching):
    _, train_pairs, _ = corpus
    source_tokenizer, target_tokenizer = tokenizers_of(prepared_dir)
    from_text = data.make_batches(
        train_pairs, source_tokenizer, target_tokenizer, shuffle=False, **batching
    )
    batches = prepared.PreparedBatches(
        prepared.PreparedData(prepared_dir).split("train"), shuffle=True, seed=1, **batching
    )
    assert len(batches) == int(from_text.cardinality())
    expected = epoch_rows(from_text.as_numpy_iterator())
    first, second = list(batches), None
    batches.on_epoch_end()
    second = list(batches)
    # Every pair exactly once an epoch, as the text pipeline gives it; a new order each epoch.
    assert epoch_rows(first) == expected == epoch_rows(second)
    assert [b[1].tolist() for b in first] != [b[1].tolist() for b in second]
    # Batches are padded to their bucket's length, as make_batches pads them.
    shapes = collections.Counter(b[1].shape for b in first)
    assert shapes == collections.Counter(b[1].shape for b in from_text.as_numpy_iterator())
    assert all(b[0][0].dtype == np.int32 for b in first)


def test_a_repeating_stream_runs_epoch_after_epoch(prepared_dir):
    split = prepared.PreparedData(prepared_dir).split("train")
    once = prepared.PreparedBatches(split, batch_size=64, seed=4)
    endless = prepared.PreparedBatches(split, batch_size=64, seed=4, repeat=True)
    assert endless.num_batches is None
    n = len(once)
    for position in (0, n - 1):
        for epoch in (0, 1):
            a, b = once.batch_of(epoch, position), endless[epoch * n + position]
            np.testing.assert_array_equal(a[1], b[1])


def test_workers_read_disjoint_shards_and_take_equal_steps(prepared_dir):
    data_ = prepared.PreparedData(prepared_dir)
    everything = data_.split("train")
    whole = {tuple(everything.pair(i)[0]) for i in range(len(everything))}
    parts = [data_.split("train", worker, 2) for worker in range(2)]
    seen = [{tuple(p.pair(i)[0]) for i in range(len(p))} for p in parts]
    assert [len(p) for p in parts] == [250 + 199, 250]
    assert not seen[0] & seen[1] and seen[0] | seen[1] == whole
    fewest = min(len(prepared.PreparedBatches(p, batch_size=32)) for p in parts)
    assert all(
        len(prepared.PreparedBatches(p, batch_size=32, num_batches=fewest)) == fewest for p in parts
    )
    with pytest.raises(ValueError, match="has 3 shards, too few for 4 workers"):
        data_.split("train", 0, 4)


def test_the_loader_runs_without_tensorflow(prepared_dir):
    pytest.importorskip("jax", reason="the TensorFlow-free loader runs on the JAX backend here")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["tensorflow"] = None  # any import of it fails
        import keras_transformer
        from keras_transformer.text import prepared
        batches = prepared.PreparedBatches(
            prepared.PreparedData({str(prepared_dir)!r}).split("train"), batch_size=32
        )
        pairs = sum(len(target_out) for _, target_out in batches)
        print(len(batches), pairs, sorted(m for m in sys.modules if m.startswith("tensorflow")))
        try:
            keras_transformer.Translator
        except ImportError as error:
            print(error)
        """
    )
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].split(" ", 2)[1:] == ["699", "['tensorflow']"]
    assert lines[1].startswith("keras_transformer.Translator needs TensorFlow")


# ----------------------------------------------------------------------------- train --data


def test_train_from_prepared_data_learns_and_resumes(prepared_dir, tmp_path):
    # No tokenizer settings: the run takes the directory's (TOKENIZER, not the defaults).
    config = {**TINY_MODEL, "data": str(prepared_dir), "batch_size": 32}
    history = train({**config, "epochs": 2}, tmp_path / "run", verbose=0)
    losses = history.history["loss"]
    assert losses[1] < losses[0]
    saved = run_dir.read_config(tmp_path / "run")
    assert saved["data"]["corpus"] == "prepared"
    assert {key: saved["training"][key] for key in TOKENIZER} == TOKENIZER
    assert saved["files"] == prepared.PreparedData(prepared_dir).files
    history = train({**config, "epochs": 3}, tmp_path / "run", verbose=0)
    assert len(history.history["loss"]) == 3


def test_train_data_takes_the_prepared_tokenizer_and_refuses_another_given(
    prepared_dir, tmp_path, capsys
):
    """`train --data DIR` takes DIR's tokenizer settings (TOKENIZER: a joint vocabulary of
    300) in place of the defaults' and a preset's; a flag or --config value that differs
    is refused in one line naming the setting and both values. Checked on the parsed
    settings (no training: the test above trains from them)."""
    from keras_transformer.cli import build_parser, settings

    parser = build_parser()
    base = ["train", "--data", str(prepared_dir), "--run-dir", str(tmp_path / "r")]

    def config(*more):
        return settings.config_from_args(parser.parse_args([*base, *more]))

    for more in ([], ["--preset", "small"], ["--preset", "tutorial"], ["--vocab-size", "300"]):
        taken = config(*more)
        assert (taken.tokenizer, taken.shared_vocab, taken.vocab_size) == (
            "sentencepiece",
            True,
            300,
        ), more
    assert config("--preset", "small").dff == 256  # the preset's other settings stay
    file = tmp_path / "settings.json"
    file.write_text(json.dumps({"vocab_size": 400, "shared_vocab": False}))
    for more, named in (
        (["--vocab-size", "400"], "vocab_size 300, but the run sets vocab_size 400"),
        (["--config", str(file), "--vocab-size", "300"], "shared_vocab true, but the run sets "),
        (["--tokenizer", "wordpiece"], 'tokenizer "sentencepiece", but the run sets tokenizer '),
    ):
        assert _cli([*base, *more]) == 2, more
        error = capsys.readouterr().err.strip()
        assert error.count("\n") == 0 and error.startswith("keras-transformer: error: "), error
        assert f"{prepared_dir} was prepared with " in error and named in error, error
        assert "leave " in error
    assert not (tmp_path / "r").exists()
    # The help says so.
    help_text = " ".join(
        parser._subparsers._group_actions[0].choices["train"].format_help().split()
    )
    assert "the run takes the tokenizer settings DIR was prepared with" in help_text
    assert "a tokenizer flag or --config value that differs is refused" in help_text


def test_prepared_data_of_another_tokenizer_is_refused_in_one_line(
    prepared_dir, corpus, tmp_path, capsys
):
    flags = ["--data", str(prepared_dir), "--run-dir", str(tmp_path / "r")]
    assert _cli(["train", *flags, "--shared-vocab", "true", "--vocab-size", "400"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0
    assert f"{prepared_dir} was prepared with vocab_size 300, but the run sets vocab_size 400" in (
        error
    )
    with pytest.raises(ValueError, match="prepared with vocab_size 300, but the run sets"):
        train({"data": str(prepared_dir), "vocab_size": 400}, tmp_path / "r", verbose=0)
    assert not (tmp_path / "r").exists()
    # A run resumed on data prepared again in its place, from other text: the same
    # settings, another vocabulary.
    settings, _, _ = corpus
    place, run = tmp_path / "data", tmp_path / "run"
    prepare.prepare(settings, place)
    train({**TOKENIZER, **TINY_MODEL, "data": str(place), "epochs": 1}, run, verbose=0)
    shutil.rmtree(place)
    prepare.prepare({**settings, "val_src": None, "val_tgt": None}, place)
    assert prepared.PreparedData(place).files != run_dir.read_config(run)["files"]
    with pytest.raises(ValueError, match=f"{place} was prepared with another tokenizer than"):
        train({**TOKENIZER, **TINY_MODEL, "data": str(place), "epochs": 2}, run, verbose=0)


def _cli(argv) -> int:
    try:
        return cli_main(argv)
    except SystemExit as exit:
        return exit.code


def test_base_preset_trains_a_few_steps_from_prepared_data(tmp_path, capsys):
    out = tmp_path / "data"
    assert _cli(["prepare", "--preset", "base", "--demo-pairs", "300", "--output", str(out)]) == 0
    assert "train from them with `keras-transformer train --data" in capsys.readouterr().out
    run = tmp_path / "run"
    flags = [
        "--steps-per-epoch",
        "3",
        "--epochs",
        "1",
        "--batch-tokens",
        "256",
        "--fit-verbose",
        "0",
    ]
    assert (
        _cli(["train", "--preset", "base", "--data", str(out), "--run-dir", str(run), *flags]) == 0
    )
    model = run_dir.read_config(run)["model"]
    assert (model["num_layers"], model["d_model"], model["dff"]) == (6, 512, 2048)
    assert (run / run_dir.LAST_CHECKPOINT).is_file()


# ----------------------------------------------------------------------------- two workers


def _train_one_worker(source: str, out_dir: Path) -> None:
    """Trains one epoch as this worker of the cluster, from the prepared directory
    `source` (or, given "text", from the built-in corpus as text), and writes into
    `out_dir` the weights it ends with, its steps and the targets it read."""
    import keras

    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    read, steps = [], []
    batch_of = prepared.PreparedBatches.batch_of

    def logged_batch_of(self, epoch, position):
        batch = batch_of(self, epoch, position)
        if self.shuffle:  # the training batches, not validation's
            read.extend(tuple(int(t) for t in row[row != 0]) for row in batch[1])
        return batch

    class CountSteps(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            steps.append(batch)

    data = {"corpus": "demo", "demo_pairs": 600} if source == "text" else {"data": source}
    config = {**TOKENIZER, **TINY_MODEL, **data, "batch_size": 32, "epochs": 1}
    run = out_dir / f"run{index}"
    prepared.PreparedBatches.batch_of = logged_batch_of
    try:
        train({**config, "strategy": "multi_worker"}, run, 0, callbacks=[CountSteps()])
    finally:
        prepared.PreparedBatches.batch_of = batch_of
    model = run_dir.load_model(run, run_dir.LAST_CHECKPOINT)
    np.savez(out_dir / f"weights{index}.npz", *model.get_weights())
    (out_dir / f"worker{index}.json").write_text(json.dumps({"read": read, "steps": steps}))


def _same_weights_on_both_workers(out_dir: Path) -> None:
    weights = [np.load(out_dir / f"weights{i}.npz") for i in range(2)]
    for name in weights[0].files:
        np.testing.assert_array_equal(weights[0][name], weights[1][name])


# Each test starts its own pair of worker processes. Two runs one after the other in the
# same pair (a second strategy on the same cluster) failed now and then on a loaded
# machine: the coordination service found a worker's heartbeats stopped.
@pytest.mark.slow
def test_two_workers_train_from_disjoint_shards_in_step(prepared_dir, tmp_path):
    workers = start_workers(2, [__file__, "worker", str(prepared_dir), str(tmp_path)])
    wait_for_workers(workers, timeout=300)
    results = [json.loads((tmp_path / f"worker{i}.json").read_text()) for i in (0, 1)]
    # Each read its own shards only, and both took as many steps as the worker with
    # fewer batches has (batches of 16: half the configured 32 each) ...
    data_ = prepared.PreparedData(prepared_dir)
    own = [data_.split("train", i, 2) for i in range(2)]
    for result, pairs in zip(results, own):
        targets = {tuple(int(t) for t in pairs.pair(i)[1][1:]) for i in range(len(pairs))}
        assert result["read"] and set(map(tuple, result["read"])) <= targets
    steps = min(len(prepared.PreparedBatches(pairs, batch_size=16)) for pairs in own)
    assert [len(result["steps"]) for result in results] == [steps, steps]
    # ... and trained one model: the same weights on both.
    _same_weights_on_both_workers(tmp_path)


@pytest.mark.slow
def test_two_workers_train_from_text_in_step(tmp_path):
    workers = start_workers(2, [__file__, "worker", "text", str(tmp_path)])
    wait_for_workers(workers, timeout=300)
    results = [json.loads((tmp_path / f"worker{i}.json").read_text()) for i in (0, 1)]
    assert len(results[0]["steps"]) == len(results[1]["steps"]) > 0
    _same_weights_on_both_workers(tmp_path)


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _train_one_worker(sys.argv[2], Path(sys.argv[3]))
