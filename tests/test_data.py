"""The batching pipeline (`data.make_batches`), and what the text side imports."""

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.constants import END_ID, START_ID
from keras_transformer.text import corpora, data


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


# Batch sizing settings, and the pairs as a list or as a dataset (as load_tfds gives them).
BATCH_SIZES = pytest.mark.parametrize(
    "sizes",
    [
        dict(batch_size=32, max_tokens=48),
        dict(batch_tokens=256, max_tokens=48),
        dict(batch_size=16, max_tokens=12, overlong="drop"),
    ],
    ids=["batch_size", "batch_tokens", "drop"],
)
AS_DATASET = pytest.mark.parametrize("as_dataset", [False, True], ids=["list", "dataset"])


def _as_given(pairs, as_dataset):
    if not as_dataset:
        return pairs
    return tf.data.Dataset.from_tensor_slices((corpora.texts(pairs, 0), corpora.texts(pairs, 1)))


@BATCH_SIZES
@AS_DATASET
def test_cardinality_is_the_number_of_batches_of_every_epoch(
    demo_pairs, demo_tokenizers, sizes, as_dataset
):
    pairs = _as_given(demo_pairs, as_dataset)
    batches = data.make_batches(pairs, *demo_tokenizers, shuffle=True, seed=0, **sizes)
    expected = int(batches.cardinality())
    first, second = list(batches), list(batches)
    assert expected > 0 and len(first) == len(second) == expected
    # The epochs were shuffled differently, and yet made as many batches.
    assert any(not np.array_equal(a[1], b[1]) for a, b in zip(first, second))


@pytest.fixture(scope="module")
def joint_sentencepiece(demo_pairs):
    from keras_transformer.text.tokenizers import SentencePieceTokenizer, learn_sentencepiece_model

    texts = corpora.texts(demo_pairs, 0) + corpora.texts(demo_pairs, 1)
    return SentencePieceTokenizer(learn_sentencepiece_model(texts, vocab_size=400))


def _rows(batches, tokenizer) -> list[tuple]:
    """`((source, target), source ids, target ids)` of every row, texts detokenized."""
    rows = []
    for (context, target_in), target_out in batches:
        # target_in and target_out are one sequence shifted by one, as without sampling.
        np.testing.assert_array_equal(
            target_in[:, 1:], target_out[:, :-1] * (target_in.numpy()[:, 1:] > 0)
        )
        context = tf.RaggedTensor.from_tensor(context, padding=0)
        target_out = tf.RaggedTensor.from_tensor(target_out, padding=0)
        sources = [text.decode() for text in tokenizer.detokenize(context).numpy()]
        targets = [text.decode() for text in tokenizer.detokenize(target_out).numpy()]
        ids = zip(map(tuple, context.to_list()), map(tuple, target_out.to_list()), strict=True)
        rows += [(pair, *row) for pair, row in zip(zip(sources, targets), ids, strict=True)]
    return rows


def test_subword_sampling_segments_every_epoch_anew(demo_pairs, joint_sentencepiece):
    tokenizers = (joint_sentencepiece, joint_sentencepiece)
    best = data.make_batches(demo_pairs, *tokenizers, batch_size=16, seed=0)
    sampled = data.make_batches(demo_pairs, *tokenizers, batch_size=16, seed=0, subword_alpha=0.2)
    # An epoch is as many batches as the best segmentations fill: Keras knows its steps.
    assert int(sampled.cardinality()) == int(best.cardinality()) > 0
    epochs = [list(sampled), list(sampled)]
    assert [len(epoch) for epoch in epochs] == [int(best.cardinality())] * 2
    best_ids = {pair: ids for pair, *ids in _rows(best, joint_sentencepiece)}
    seen = {}
    for epoch in epochs:
        rows = _rows(epoch, joint_sentencepiece)
        # Every row is one of the corpus's pairs, whole, and the epoch covers the corpus.
        assert {pair for pair, *_ in rows} <= set(best_ids)
        assert len({pair for pair, *_ in rows}) > 0.8 * len(demo_pairs)
        # Most rows are segmented otherwise than the best segmentation, and longer.
        differ = [pair for pair, *ids in rows if ids != list(best_ids[pair])]
        assert len(differ) > len(rows) / 2
        tokens = sum(len(source) + len(target) for _, source, target in rows)
        assert tokens > sum(len(s) + len(t) for s, t in (best_ids[p] for p, *_ in rows))
        for pair, *ids in rows:
            seen.setdefault(pair, set()).add(tuple(ids))
    # The same pair is segmented anew in the second epoch.
    assert sum(len(segmentations) > 1 for segmentations in seen.values()) > len(seen) / 2


@BATCH_SIZES
@AS_DATASET
def test_sampled_epochs_have_the_batches_their_cardinality_says(
    demo_pairs, joint_sentencepiece, sizes, as_dataset
):
    pairs = _as_given(demo_pairs, as_dataset)
    tokenizers = (joint_sentencepiece, joint_sentencepiece)
    best = data.make_batches(pairs, *tokenizers, seed=0, **sizes)
    sampled = data.make_batches(pairs, *tokenizers, seed=0, subword_alpha=0.2, **sizes)
    expected = int(best.cardinality())
    assert expected > 0 and int(sampled.cardinality()) == expected
    assert len(list(sampled)) == len(list(sampled)) == expected


@pytest.mark.parametrize("overlong", ["truncate", "drop"])
def test_a_sample_too_long_for_max_tokens_gives_way_to_the_best_segmentation(
    demo_pairs, joint_sentencepiece, overlong
):
    # max_tokens fits every pair's best segmentation but not its samples at alpha
    # 0.05, which split words into many pieces: no pair may be cut or dropped for it.
    tokenizers = (joint_sentencepiece, joint_sentencepiece)
    best = data.make_batches(demo_pairs, *tokenizers, shuffle=False)
    best_rows = _rows(best, joint_sentencepiece)
    # The source with START and END, the target_out row with END: both within max_tokens.
    longest = max(max(len(source), len(target)) for _, source, target in best_rows)
    sampled = data.make_batches(
        demo_pairs,
        *tokenizers,
        batch_size=16,
        max_tokens=longest,
        overlong=overlong,
        seed=0,
        subword_alpha=0.05,
    )
    rows = _rows(sampled, joint_sentencepiece)
    # Every row is a whole pair of the corpus, [END] included, ...
    assert {pair for pair, *_ in rows} <= set(demo_pairs)
    assert all(target[-1] == END_ID and len(target) <= longest for _, _, target in rows)
    assert len({pair for pair, *_ in rows}) > 0.8 * len(demo_pairs)
    # ... some had to keep their best segmentation, and others were sampled.
    best_ids = {pair: (source, target) for pair, source, target in best_rows}
    kept = sum((source, target) == best_ids[pair] for pair, source, target in rows)
    assert 0 < kept < len(rows)


def test_subword_sampling_is_checked_before_reading_the_corpus(demo_tokenizers):
    def unreadable():
        raise AssertionError("the corpus was read before the arguments were checked")
        yield

    pairs = tf.data.Dataset.from_generator(
        unreadable, output_signature=(tf.TensorSpec([], tf.string),) * 2
    )
    with pytest.raises(ValueError, match="use SentencePiece tokenizers, or subword_alpha=0"):
        data.make_batches(pairs, *demo_tokenizers, subword_alpha=0.2)
    for alpha in (-0.5, 1.5):
        with pytest.raises(ValueError, match=r"subword_alpha must be in \[0, 1\]"):
            data.make_batches(pairs, *demo_tokenizers, subword_alpha=alpha)


def test_the_readers_are_still_importable_from_data():
    for name in ("demo_corpus", "read_parallel_files", "read_tsv", "load_tfds", "load_corpus"):
        assert getattr(data, name) is getattr(corpora, name)
    for name in ("split_lines", "split_pairs", "texts", "TFDS_TED", "Pair"):
        assert getattr(data, name) is getattr(corpora, name)


@pytest.mark.parametrize("subword_alpha", [0.0, 0.2], ids=["best", "sampled"])
def test_training_knows_its_steps_from_the_first_epoch(tmp_path, capsys, subword_alpha):
    from keras_transformer import training

    config = dict(
        demo_pairs=300, val_fraction=0.1, vocab_size=500, vocab_lower_thresh=1, num_layers=1,
        d_model=16, num_heads=2, dff=32, max_tokens=16, batch_size=32, warmup_steps=10, epochs=2,
        subword_alpha=subword_alpha,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        training.train(config, tmp_path, verbose=1)
    assert not [w for w in caught if "ran out of data" in str(w.message)]
    progress = capsys.readouterr().out
    # Keras writes "1/Unknown" while a dataset's cardinality is unknown.
    assert "Epoch 1/2" in progress and "Unknown" not in progress


# The text side: corpora, tokenizers, the input pipeline and the prepared data.
TEXT_MODULES = ("corpora.py", "data.py", "prepared.py", "buckets.py", "tokenizers/*.py")
# What comes after it in the data's one-way flow (the model and what imports it).
LATER_MODULES = {"config", "config_checks", "model", "training", "layers", "run_dir"}


def _run_time_imports(path: Path):
    """The names `path` imports, but those under `if TYPE_CHECKING:` (annotations)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in ast.walk(block)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def test_the_input_pipeline_never_imports_the_model():
    package = Path(data.__file__).parent
    for pattern in TEXT_MODULES:
        for path in sorted(package.glob(pattern)):
            for name in _run_time_imports(path):
                parts = name.split(".")
                if parts[0] == "keras_transformer" and len(parts) > 1:
                    assert parts[1] not in LATER_MODULES, (path.name, name)
