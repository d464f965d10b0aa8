"""Cached in-graph search against the uncached computation and against each other."""

import os
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.constants import END_ID, PAD_ID, START_ID
from keras_transformer.inference import beam, sampling, sub_batches
from keras_transformer.inference.batch_decoding import LengthPolicy
from keras_transformer.inference.search import MATMUL_ATTENTION_ROWS
from tests.helpers import SEARCH_SCORE_ATOL, assert_same_hypotheses, tiny_transformer

MAX_LENGTH = 16


@pytest.fixture(scope="module")
def tiny(tiny_translation_model):
    tiny = tiny_translation_model
    tiny.context_ids = tiny.source_tokenizer.tokenize(tf.constant(tiny.sentences)).to_tensor()
    return tiny


def _live(result):
    """(batch, steps) True at the steps a row actually generated."""
    steps = result.logits.shape[1]
    return np.arange(steps)[None, :] < result.lengths.numpy()[:, None]


def test_the_tiny_model_s_greedy_choices_are_far_from_ties(tiny):
    """What lets the tests compare two computations' tokens on the 16 sentences exactly:
    at every step greedy search takes, the best token leads the runner-up by 100 times
    SEARCH_SCORE_ATOL in log-probability (2.4 or more seen, on Eigen's and oneDNN's
    kernels), so no rounding can swap them; and every row ends before MAX_LENGTH. A
    CPU whose kernels train a model without that margin fails here first, by name."""
    result = sampling.greedy_search(tiny.model, tiny.context_ids, MAX_LENGTH, return_logits=True)
    assert np.all(result.lengths.numpy() < MAX_LENGTH), result.lengths.numpy()
    ranked = np.sort(tf.nn.log_softmax(result.logits).numpy(), axis=-1)
    margins = (ranked[..., -1] - ranked[..., -2])[_live(result)]
    assert margins.min() >= 100 * SEARCH_SCORE_ATOL, margins.min()


def test_cached_greedy_equals_uncached(tiny):
    cached = sampling.greedy_search(tiny.model, tiny.context_ids, MAX_LENGTH, return_logits=True)
    uncached = sampling.greedy_search(
        tiny.model, tiny.context_ids, MAX_LENGTH, use_cache=False, return_logits=True
    )
    # The trained model ends its rows: the comparison covers per-row stopping.
    assert np.all(cached.lengths.numpy() < MAX_LENGTH)
    np.testing.assert_array_equal(cached.tokens.numpy(), uncached.tokens.numpy())
    np.testing.assert_array_equal(cached.lengths.numpy(), uncached.lengths.numpy())
    live = _live(cached)
    np.testing.assert_allclose(
        cached.logits.numpy()[live], uncached.logits.numpy()[live], atol=1e-4
    )


def test_cached_equals_uncached_without_end(tiny):
    """All max_length steps, well past [END]: the cache positions stay right."""
    cached = sampling.greedy_search(
        tiny.model, tiny.context_ids, MAX_LENGTH, stop_at_end=False, return_logits=True
    )
    uncached = sampling.greedy_search(
        tiny.model,
        tiny.context_ids,
        MAX_LENGTH,
        stop_at_end=False,
        use_cache=False,
        return_logits=True,
    )
    assert np.all(cached.lengths.numpy() == MAX_LENGTH)
    np.testing.assert_array_equal(cached.tokens.numpy(), uncached.tokens.numpy())
    np.testing.assert_allclose(cached.logits.numpy(), uncached.logits.numpy(), atol=1e-4)


def test_greedy_scores_are_teacher_forced_log_probabilities(tiny):
    result = sampling.greedy_search(tiny.model, tiny.context_ids, MAX_LENGTH)
    tokens = result.tokens.numpy()
    start = np.full((len(tokens), 1), 2, np.int64)
    logits = tiny.model((tiny.context_ids, np.concatenate([start, tokens[:, :-1]], 1)))
    log_probs = tf.nn.log_softmax(logits).numpy()
    picked = np.take_along_axis(log_probs, tokens[..., None], -1)[..., 0]
    live = np.arange(tokens.shape[1])[None, :] < result.lengths.numpy()[:, None]
    expected = np.where(live, picked, 0.0).sum(-1)
    np.testing.assert_allclose(result.scores.numpy(), expected, atol=1e-4)
    # Each row ends with its [END], 0 after it.
    for row, length in zip(tokens, result.lengths.numpy(), strict=True):
        assert row[length - 1] == sampling.END_ID
        assert not row[length:].any()


def test_beam_width_one_equals_greedy(tiny):
    greedy = sampling.greedy_search(tiny.model, tiny.context_ids, MAX_LENGTH)
    beamed = beam.beam_search(tiny.model, tiny.context_ids, 1, MAX_LENGTH, length_penalty_alpha=0.0)
    np.testing.assert_array_equal(beamed.tokens.numpy(), greedy.tokens.numpy())
    np.testing.assert_allclose(beamed.scores.numpy(), greedy.scores.numpy(), atol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_never_scores_below_greedy(tiny, alpha):
    greedy = sampling.greedy_search(tiny.model, tiny.context_ids, MAX_LENGTH)
    beamed = beam.beam_search(tiny.model, tiny.context_ids, 4, MAX_LENGTH, alpha)

    def ranked(result):
        return result.scores.numpy() / beam.length_penalty(result.lengths, alpha).numpy()

    assert np.all(ranked(beamed) >= ranked(greedy) - 1e-5)


def test_batch_equals_one_by_one(tiny):
    greedy = sampling.greedy_search(tiny.model, tiny.context_ids, MAX_LENGTH)
    beamed = beam.beam_search(tiny.model, tiny.context_ids, 3, MAX_LENGTH)
    for i, sentence in enumerate(tiny.sentences[:6]):
        ids = tiny.source_tokenizer.tokenize(tf.constant([sentence])).to_tensor()
        alone = sampling.greedy_search(tiny.model, ids, MAX_LENGTH)
        np.testing.assert_array_equal(alone.tokens.numpy()[0], greedy.tokens.numpy()[i])
        np.testing.assert_allclose(alone.scores.numpy()[0], greedy.scores.numpy()[i], atol=1e-4)
        alone = beam.beam_search(tiny.model, ids, 3, MAX_LENGTH)
        np.testing.assert_array_equal(alone.tokens.numpy()[0], beamed.tokens.numpy()[i])


def test_sampling_is_seeded_and_top_k_one_is_greedy(tiny):
    first = sampling.sample(tiny.model, tiny.context_ids, MAX_LENGTH, temperature=2.0, seed=7)
    again = sampling.sample(tiny.model, tiny.context_ids, MAX_LENGTH, temperature=2.0, seed=7)
    np.testing.assert_array_equal(first.tokens.numpy(), again.tokens.numpy())
    greedy = sampling.greedy_search(tiny.model, tiny.context_ids, MAX_LENGTH)
    top1 = sampling.sample(tiny.model, tiny.context_ids, MAX_LENGTH, top_k=1, seed=3)
    np.testing.assert_array_equal(top1.tokens.numpy(), greedy.tokens.numpy())
    # Hot sampling departs from greedy somewhere and scores no better.
    assert not np.array_equal(first.tokens.numpy(), greedy.tokens.numpy())
    assert first.scores.numpy().sum() < greedy.scores.numpy().sum()

    # Streams of one seed (a translator's sub-batches) draw apart, and no stream
    # repeats a neighbouring seed's draws (as seed + stream would: (7, 1) ~ (8, 0)).
    def tokens(seed):
        return sampling.sample(
            tiny.model, tiny.context_ids, MAX_LENGTH, temperature=2.0, seed=seed
        ).tokens.numpy()

    np.testing.assert_array_equal(tokens(tf.constant([7, 0], tf.int64)), first.tokens.numpy())
    assert not np.array_equal(tokens(tf.constant([7, 1], tf.int64)), tokens(8))
    assert not np.array_equal(tokens(tf.constant([7, 1], tf.int64)), first.tokens.numpy())


def test_filter_logits_top_k_and_top_p():
    logits = tf.math.log(tf.constant([[0.5, 0.3, 0.15, 0.05]]))
    kept = np.isfinite(sampling.filter_logits(logits, top_k=2).numpy())
    np.testing.assert_array_equal(kept, [[True, True, False, False]])
    kept = np.isfinite(sampling.filter_logits(logits, top_p=0.7).numpy())
    np.testing.assert_array_equal(kept, [[True, True, False, False]])
    kept = np.isfinite(sampling.filter_logits(logits, top_p=0.5).numpy())
    np.testing.assert_array_equal(kept, [[True, False, False, False]])
    with pytest.raises(ValueError, match="temperature"):
        sampling.filter_logits(logits, temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        sampling.filter_logits(logits, top_p=0.0)


def test_in_graph_with_a_dynamic_beam_width_and_zero_rows(tiny):
    search = tf.function(lambda ids, width: beam.beam_search(tiny.model, ids, width, 8))
    eager = beam.beam_search(tiny.model, tiny.context_ids, 2, 8)
    np.testing.assert_array_equal(
        search(tiny.context_ids, tf.constant(2)).tokens.numpy(), eager.tokens.numpy()
    )
    assert search(tiny.context_ids[:0], tf.constant(3)).tokens.shape == (0, 8)
    assert sampling.greedy_search(tiny.model, tiny.context_ids[:0], 8).tokens.shape == (0, 8)


def test_bad_arguments(tiny):
    with pytest.raises(ValueError, match="beam_width"):
        beam.beam_search(tiny.model, tiny.context_ids, 0)
    with pytest.raises(ValueError, match="max_length"):
        sampling.greedy_search(tiny.model, tiny.context_ids, 0)
    # A negative alpha would make the search's stop test stop rows too early.
    for alpha in (-0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="length_penalty_alpha"):
            beam.beam_search(tiny.model, tiny.context_ids, 2, 8, length_penalty_alpha=alpha)
    # A width given as a tensor is checked in the graph, with a message that names it.
    search = tf.function(lambda ids, width: beam.beam_search(tiny.model, ids, width, 8))
    for width in (0, -3):
        with pytest.raises(tf.errors.InvalidArgumentError, match="beam_width must be positive"):
            search(tiny.context_ids, tf.constant(width))


def test_searches_are_objects_built_with_their_settings_and_called_alike(tiny):
    """Greedy, beam and sampling searches take their settings when built and are called
    the same way, giving what their functions give; a seeded sampling search draws
    from stream k of its seed as the pair (seed, k) does; bad settings fail when a
    search is built (or copied), naming the argument."""
    model, ids = tiny.model, tiny.context_ids
    for search, function in (
        (
            sampling.GreedySearch(max_length=MAX_LENGTH),
            lambda: sampling.greedy_search(model, ids, MAX_LENGTH),
        ),
        (
            beam.BeamSearch(beam_width=3, max_length=MAX_LENGTH),
            lambda: beam.beam_search(model, ids, 3, MAX_LENGTH),
        ),
        (
            sampling.SamplingSearch(max_length=MAX_LENGTH, temperature=2.0, seed=7),
            lambda: sampling.sample(model, ids, MAX_LENGTH, temperature=2.0, seed=7),
        ),
    ):
        result, expected = search(model, ids), function()
        assert result.tokens.shape == (len(ids), MAX_LENGTH)
        np.testing.assert_array_equal(result.tokens.numpy(), expected.tokens.numpy())
        np.testing.assert_allclose(result.scores.numpy(), expected.scores.numpy(), atol=1e-5)
    seeded = sampling.SamplingSearch(max_length=MAX_LENGTH, temperature=2.0, seed=7)
    fifth = seeded(model, ids, stream=5).tokens.numpy()
    pair = sampling.sample(model, ids, MAX_LENGTH, temperature=2.0, seed=(7, 5))
    np.testing.assert_array_equal(fifth, pair.tokens.numpy())
    assert not np.array_equal(fifth, seeded(model, ids, stream=6).tokens.numpy())
    assert beam.BeamSearch(beam_width=3).replace(beam_width=1).beam_width == 1
    for build, name in (
        (lambda: sampling.GreedySearch(max_length=0), "max_length"),
        (lambda: sampling.SamplingSearch(temperature=0.0), "temperature"),
        (lambda: sampling.SamplingSearch(top_k=-1), "top_k"),
        (lambda: sampling.SamplingSearch(top_p=1.5), "top_p"),
        (lambda: beam.BeamSearch(beam_width=0), "beam_width"),
        (lambda: beam.BeamSearch().replace(length_penalty_alpha=-1.0), "length_penalty_alpha"),
    ):
        with pytest.raises(ValueError, match=name):
            build()


def test_cached_beam_equals_uncached_beam(tiny):
    cached = beam.beam_search(tiny.model, tiny.context_ids, 3, MAX_LENGTH)
    uncached = beam.beam_search(tiny.model, tiny.context_ids, 3, MAX_LENGTH, use_cache=False)
    np.testing.assert_array_equal(cached.tokens.numpy(), uncached.tokens.numpy())
    np.testing.assert_allclose(cached.scores.numpy(), uncached.scores.numpy(), atol=1e-4)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_source_relative_cap_bounds_every_row(tiny, search):
    """Each row stops at its own limit, with [END] as its last token; rows under it are
    untouched."""
    context_ids = tiny.context_ids
    free = (
        sampling.greedy_search(tiny.model, context_ids, 20)
        if search == "greedy"
        else beam.beam_search(tiny.model, context_ids, 3, 20)
    )
    limits = tf.constant(np.arange(len(context_ids)) % 8 + 1, tf.int32)
    capped = (
        sampling.greedy_search(tiny.model, context_ids, 20, row_limits=limits)
        if search == "greedy"
        else beam.beam_search(tiny.model, context_ids, 3, 20, row_limits=limits)
    )
    untouched = 0
    for row, limit in enumerate(limits.numpy()):
        length = int(capped.lengths[row])
        assert 1 <= length <= limit
        assert int(capped.tokens[row, length - 1]) == END_ID
        if int(free.lengths[row]) <= limit and search == "greedy":
            np.testing.assert_array_equal(capped.tokens[row], free.tokens[row])
            untouched += 1
    # Rows on both sides of their limit: the comparison above ran.
    assert search == "beam" or 0 < untouched < len(context_ids)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_row_limits_end_rows_where_end_is_an_ordinary_token(tiny, search):
    """With `stop_at_end=False` (benchmarks), a row still ends at its limit: one [END]
    last, nothing after it, its length the limit."""
    limits = tf.constant(np.arange(len(tiny.context_ids)) % 3 + 2, tf.int32)
    kwargs = dict(stop_at_end=False, row_limits=limits)
    capped = (
        sampling.greedy_search(tiny.model, tiny.context_ids, 12, **kwargs)
        if search == "greedy"
        else beam.beam_search(tiny.model, tiny.context_ids, 3, 12, **kwargs)
    )
    for row, limit in enumerate(limits.numpy()):
        assert int(capped.lengths[row]) == limit
        assert int(capped.tokens[row, limit - 1]) == END_ID
        assert np.all(capped.tokens[row, limit:].numpy() == 0)


def test_source_relative_limits():
    limits = LengthPolicy(50, 1.5, 10).source_relative(tf.constant([0, 4, 100]))
    np.testing.assert_array_equal(limits, [10, 16, 50])
    # Beyond int32's range before the clamp: still the export's maximum, not 1.
    huge = LengthPolicy(50, 1e12, 1e12).source_relative(tf.constant([0, 4]))
    np.testing.assert_array_equal(huge, [50, 50])
    # Below 1: one token, the row's [END].
    below = LengthPolicy(50, 0.0, -5.0).source_relative(tf.constant([0, 4]))
    np.testing.assert_array_equal(below, [1, 1])
    for a, b in ((-1.0, 10.0), (float("nan"), 10.0), (float("inf"), 10.0), (1.5, float("nan"))):
        with pytest.raises(ValueError, match="max_length_"):
            LengthPolicy.check_cap(a, b)
    LengthPolicy.check_cap(None, 10.0)


class _Noting:
    """`search` as `in_sub_batches` calls it, noting each sub-batch's shape in `seen`."""

    def __init__(self, search, seen=None):
        self.search, self.seen = search, seen

    def steps(self, model):
        return self.search.steps(model)

    def __call__(self, model, context_ids, **kwargs):
        if self.seen is not None:
            self.seen.append(tuple(context_ids.shape))
        return self.search(model, context_ids, **kwargs)


def _sub_batch_search(search, seen=None):
    """The search "greedy" or "beam" (of width 3), noting sub-batch shapes in `seen`."""
    if search == "greedy":
        return _Noting(sampling.GreedySearch(max_length=MAX_LENGTH), seen)
    return _Noting(beam.BeamSearch(beam_width=3, max_length=MAX_LENGTH), seen)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_sub_batches_give_the_results_of_one_batch(tiny, search):
    ragged = tiny.source_tokenizer.tokenize(tf.constant(tiny.sentences))
    whole = _sub_batch_search(search)(tiny.model, ragged.to_tensor())
    seen = []
    parts = sub_batches.in_sub_batches(tiny.model, _sub_batch_search(search, seen), ragged, 3)
    # 16 rows, 3 at a time, in the rows' own order again.
    assert [rows for rows, _ in seen] == [3, 3, 3, 3, 3, 1]
    np.testing.assert_array_equal(parts.tokens.numpy(), whole.tokens.numpy())
    np.testing.assert_array_equal(parts.lengths.numpy(), whole.lengths.numpy())
    np.testing.assert_allclose(parts.scores.numpy(), whole.scores.numpy(), atol=1e-5)
    # Traced, as in the SavedModel.
    traced = tf.function(
        lambda ids: sub_batches.in_sub_batches(tiny.model, _sub_batch_search(search), ids, 5)
    )
    np.testing.assert_array_equal(traced(ragged).tokens.numpy(), whole.tokens.numpy())
    assert traced(ragged[:0]).tokens.shape == (0, MAX_LENGTH)


def test_searches_in_flight_share_the_bound_and_give_the_same_results(tiny):
    """With two searches in flight each takes half the bound, or half the rows when
    fewer; the results are those of one batch, also traced (where they run side by side)."""
    ragged = tiny.source_tokenizer.tokenize(tf.constant(tiny.sentences))
    whole = _sub_batch_search("greedy")(tiny.model, ragged.to_tensor())
    for rows, bound, sizes in ((16, 8, [4, 4, 4, 4]), (5, 64, [3, 2]), (1, 64, [1])):
        seen = []
        search = _sub_batch_search("greedy", seen)
        parts = sub_batches.in_sub_batches(tiny.model, search, ragged[:rows], bound, in_flight=2)
        assert [size for size, _ in seen] == sizes
        np.testing.assert_array_equal(parts.tokens.numpy(), whole.tokens.numpy()[:rows])
    traced = tf.function(
        lambda ids: sub_batches.in_sub_batches(
            tiny.model, _sub_batch_search("greedy"), ids, 6, in_flight=2
        )
    )
    np.testing.assert_array_equal(traced(ragged).tokens.numpy(), whole.tokens.numpy())
    assert traced(ragged[:0]).tokens.shape == (0, MAX_LENGTH)
    with pytest.raises(ValueError, match="in_flight"):
        sub_batches.in_sub_batches(tiny.model, search, ragged, 8, in_flight=0)
    # The bound holds when in_flight does not divide it: 2 + 2 rows of 5, not 3 + 3.
    assert sub_batches.rows_per_search(5, 2) == 2


def test_two_searches_split_a_batch_by_work_and_give_the_same_results(tiny):
    """With `balance_lengths`, the two searches of one round get about equal work (rows x
    longest length), not equal rows; larger batches and other in-flight counts keep
    their fixed sub-batches, and the results are those of one batch."""
    sentences = ["one"] * 7 + [" ".join(["two"] * 20)] + ["three four"] * 8
    ragged = tiny.source_tokenizer.tokenize(tf.constant(sentences))
    whole = _sub_batch_search("greedy")(tiny.model, ragged.to_tensor())
    # Sorted lengths: 7 rows of 3 tokens, 8 of 4, one of 22. Equal rows would be
    # 8 x 4 and 8 x 22 tokens; by work, 14 x 4 (56) and 2 x 22 (44).
    for kwargs, sizes in (
        ({"sub_batch_size": 64, "in_flight": 2}, [(14, 4), (2, 22)]),
        ({"sub_batch_size": 8, "in_flight": 2}, [(4, 3), (4, 4), (4, 4), (4, 22)]),
        ({"sub_batch_size": 64, "in_flight": 4}, [(4, 3), (4, 4), (4, 4), (4, 22)]),
    ):
        seen = []
        search = _sub_batch_search("greedy", seen)
        parts = sub_batches.in_sub_batches(
            tiny.model, search, ragged, balance_lengths=True, **kwargs
        )
        assert seen == sizes
        np.testing.assert_array_equal(parts.tokens.numpy(), whole.tokens.numpy())
        np.testing.assert_array_equal(parts.lengths.numpy(), whole.lengths.numpy())
    traced = tf.function(
        lambda ids: sub_batches.in_sub_batches(
            tiny.model, _sub_batch_search("greedy"), ids, 64, 2, balance_lengths=True
        )
    )
    np.testing.assert_array_equal(traced(ragged).tokens.numpy(), whole.tokens.numpy())
    for rows in (0, 1, 2):
        result = traced(ragged[:rows])
        np.testing.assert_array_equal(result.tokens.numpy(), whole.tokens.numpy()[:rows])


def test_the_two_way_split_minimizes_the_larger_work():
    rng = np.random.default_rng(0)
    for rows in (2, 3, 17, 64):
        for _ in range(20):
            lengths = np.sort(rng.integers(0, 60, size=rows))
            bounds = sub_batches.two_way_split(tf.constant(lengths)).numpy()
            assert bounds[0] == 0 and bounds[2] == rows and 1 <= bounds[1] < rows

            def work(k, lengths=lengths, rows=rows):
                return max(lengths[k - 1] * k, lengths[-1] * (rows - k))

            assert work(bounds[1]) == min(work(k) for k in range(1, rows))


# A call of many sub-batches and a call of one, side by side on an inter-op pool of
# one thread: prints which call ended first.
ONE_THREAD_CALLS = """
import threading
import time
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(1)
from keras_transformer.inference.sub_batches import map_sub_batches

def work(rows, index):  # a chain of small ops, as a search's steps are
    x = tf.cast(rows[:, None], tf.float32) + tf.zeros([1, 64])
    _, x = tf.while_loop(lambda i, x: i < 5000, lambda i, x: (i + 1, tf.tanh(x * 0.5)), (0, x))
    return (tf.reduce_sum(x, 1),)

@tf.function(input_signature=[tf.TensorSpec([None], tf.int64)])
def run(lengths):
    return map_sub_batches(work, lengths, [(tf.float32, [None])], sub_batch_size=1)

run(tf.ones([2], tf.int64))  # traced
ended = []
def call(name, rows):
    run(tf.ones([rows], tf.int64))
    ended.append(name)
long = threading.Thread(target=call, args=("long", 300))
long.start()
time.sleep(0.3)
short = threading.Thread(target=call, args=("short", 1))
short.start()
long.join(); short.join()
print(" ".join(ended))
"""


def test_a_long_call_gives_the_thread_back_between_sub_batches():
    """With an inter-op pool of one thread (TensorFlow's default is about one a
    core), a call of one sub-batch made while a call of 300 runs ends first:
    between sub-batches the long call queues behind it (`sub_batches.yield_thread`).
    Without that, the long call holds the thread to its end (3.4 s here) and the
    short one waits for it. The order is the test, not a time."""
    run = subprocess.run(
        [sys.executable, "-c", ONE_THREAD_CALLS],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["short", "long"]


def test_a_long_row_pads_only_its_own_sub_batch(tiny):
    """Rows are sorted by length: the long row shares its sub-batch with the next longest
    rows, and every other sub-batch is as narrow as its own rows."""
    sentences = ["one"] * 7 + [" ".join(["two"] * 20)] + ["three four"] * 8
    ragged = tiny.source_tokenizer.tokenize(tf.constant(sentences))
    seen = []
    search = _sub_batch_search("greedy", seen)
    result = sub_batches.in_sub_batches(tiny.model, search, ragged, 4)
    assert seen == [(4, 3), (4, 4), (4, 4), (4, 22)]
    alone = sampling.greedy_search(tiny.model, ragged[7:8].to_tensor(), MAX_LENGTH)
    np.testing.assert_array_equal(result.tokens.numpy()[7], alone.tokens.numpy()[0])
    with pytest.raises(ValueError, match="sub_batch_size"):
        sub_batches.in_sub_batches(tiny.model, search, ragged, 0)


SEARCHES_OF_MANY_ROWS = {
    "greedy": lambda model, ids, **kwargs: sampling.greedy_search(model, ids, MAX_LENGTH, **kwargs),
    "beam": lambda model, ids, **kwargs: beam.beam_search(model, ids, 4, MAX_LENGTH, **kwargs),
    "nbest": lambda model, ids, **kwargs: beam.beam_search(
        model, ids, 4, MAX_LENGTH, num_hypotheses=3, **kwargs
    ),
}


def _untrained_model():
    """Random weights, whose beams change order more than a trained model's do. It
    never predicts [END], so rows end at their limits (near-uniform, it would end
    every row at once)."""
    model = tiny_transformer(vocab_size=30, seed=3)
    bias = model.final_layer.bias.numpy()
    bias[END_ID] = -10.0
    model.final_layer.bias.assign(bias)
    return model


@pytest.mark.parametrize("weights", ["trained", "untrained"])
@pytest.mark.parametrize("search", sorted(SEARCHES_OF_MANY_ROWS))
def test_searches_over_many_rows_drop_ended_rows_with_the_same_results(
    tiny, monkeypatch, search, weights
):
    """From `MATMUL_ATTENTION_ROWS` rows, greedy search steps only the rows still
    decoding and beam search only the sentences still searching; each row's tokens,
    length and score are those of a search that steps every row to the end (the
    uncached one). Rows end at limits of 1 to 8 tokens and (trained) at their [END],
    so rows leave at many steps."""
    run = SEARCHES_OF_MANY_ROWS[search]
    rows = max(MATMUL_ATTENTION_ROWS, len(tiny.sentences))
    if weights == "trained":
        model = tiny.model
        context_ids = tf.constant(
            np.resize(tiny.context_ids.numpy(), (rows, tiny.context_ids.shape[1]))
        )
    else:
        model = _untrained_model()
        context_ids = tf.constant(np.random.default_rng(5).integers(4, 30, (rows, 7)))
    limits = tf.constant(np.arange(rows) % 9 + 1, tf.int32)
    limits = tf.where(tf.range(rows) % 3 == 0, MAX_LENGTH, limits)  # some end at [END]
    kept = []
    keep = model.keep_decoding_rows

    def spy(state, rows_kept):
        kept.append(rows_kept)
        return keep(state, rows_kept)

    monkeypatch.setattr(model, "keep_decoding_rows", spy)
    result = run(model, context_ids, row_limits=limits)
    assert kept, "no row was dropped"
    reference = run(model, context_ids, use_cache=False, row_limits=limits)
    lengths = result.lengths.numpy()
    best = lengths[:, 0] if search == "nbest" else lengths  # n-best: the best's
    # Rows leave at many steps: at least four (a trained model's [END]s fall where its
    # float rounding puts them, which differs between CPUs' kernels).
    assert len(set(best)) >= 4
    if weights == "trained":
        assert np.any(best < limits.numpy())  # some at their [END]
    # Cached and uncached attention round differently: a hypothesis the model scores as
    # its runner-up within float error may change places (seen on AVX2 kernels: 2 of the
    # 48 n-best entries of the trained model); at most one entry in 12 may.
    alpha = None if search == "greedy" else 0.6
    entries = int(np.prod(result.tokens.shape[:-1]))
    assert_same_hypotheses(
        result,
        reference,
        alpha=alpha,
        model=model,
        context_ids=context_ids,
        max_near_ties=entries // 12,
    )


def _teacher_forced_scores(model, context_ids, tokens, lengths):
    """The model's log-probability of each row's `tokens` (its first `lengths`, [END]
    included), from one teacher-forced call."""
    tokens, lengths = np.asarray(tokens), np.asarray(lengths)
    start = np.full((len(tokens), 1), START_ID)
    target_in = np.concatenate([start, tokens[:, :-1]], 1)
    log_probs = tf.nn.log_softmax(model((context_ids, target_in))).numpy()
    picked = np.take_along_axis(log_probs, tokens[..., None], -1)[..., 0]
    live = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
    return np.where(live, picked, 0.0).sum(-1)


@pytest.mark.parametrize("max_length", [MAX_LENGTH, 3])
def test_nbest_first_is_the_beam_and_scores_are_sorted_log_probabilities(tiny, max_length):
    """Each row's k best hypotheses, best first: the first is what beam search returns
    (tokens, length, score), the penalized scores fall, and each score is the model's
    log-probability of its hypothesis. At 3 steps rows run out of steps, so
    unfinished hypotheses (complete at the limit) are among them."""
    ids, alpha = tiny.context_ids, 0.6
    best = beam.beam_search(tiny.model, ids, 4, max_length, alpha)
    nbest = beam.beam_search(tiny.model, ids, 4, max_length, alpha, num_hypotheses=3)
    rows = len(ids)
    assert nbest.tokens.shape == (rows, 3, max_length) and nbest.scores.shape == (rows, 3)
    # The n-best search keeps more hypotheses per step than the beam's: another
    # computation, whose scores round differently (1e-7 apart on AVX2 kernels).
    first = types.SimpleNamespace(
        tokens=nbest.tokens[:, 0], lengths=nbest.lengths[:, 0], scores=nbest.scores[:, 0]
    )
    assert_same_hypotheses(
        first, best, alpha=alpha, model=tiny.model, context_ids=ids, max_near_ties=rows // 4
    )
    scores, lengths = nbest.scores.numpy(), nbest.lengths.numpy()
    assert np.all(np.isfinite(scores))
    ranked = scores / beam.length_penalty(lengths, alpha).numpy()
    assert np.all(np.diff(ranked, axis=1) <= 1e-6)
    expected = _teacher_forced_scores(
        tiny.model,
        np.repeat(ids.numpy(), 3, axis=0),
        nbest.tokens.numpy().reshape(rows * 3, max_length),
        lengths.reshape(-1),
    )
    np.testing.assert_allclose(scores.reshape(-1), expected, atol=1e-4)
    # Hypotheses of a row differ; a finished one ends with [END].
    for row in range(rows):
        assert len({tuple(t) for t in nbest.tokens.numpy()[row]}) == 3
    ended = nbest.tokens.numpy()[np.arange(rows)[:, None], np.arange(3), lengths - 1] == END_ID
    assert ended.all() if max_length == MAX_LENGTH else not ended.all()
    # k = 1: the beam's result with a hypothesis axis; traced, k and the width as tensors.
    one = beam.beam_search(tiny.model, ids, 4, max_length, alpha, num_hypotheses=1)
    np.testing.assert_array_equal(one.tokens.numpy()[:, 0], best.tokens.numpy())
    traced = tf.function(
        lambda ids, width, k: beam.beam_search(
            tiny.model, ids, width, max_length, alpha, num_hypotheses=k
        )
    )
    again = traced(ids, tf.constant(4), tf.constant(3))
    # Traced, the search is another computation too (1.4e-5 apart on AVX2 kernels).
    assert_same_hypotheses(
        again, nbest, alpha=alpha, model=tiny.model, context_ids=ids, max_near_ties=rows // 4
    )
    assert traced(ids[:0], tf.constant(4), tf.constant(2)).tokens.shape == (0, 2, max_length)


def test_nbest_bad_numbers_of_hypotheses(tiny):
    for k in (0, 5):
        with pytest.raises(ValueError, match="num_hypotheses"):
            beam.BeamSearch(beam_width=4, num_hypotheses=k)
    traced = tf.function(
        lambda ids, width, k: beam.beam_search(tiny.model, ids, width, 8, num_hypotheses=k)
    )
    for width, k in ((4, 0), (2, 3)):
        with pytest.raises(tf.errors.InvalidArgumentError, match="num_hypotheses must be"):
            traced(tiny.context_ids, tf.constant(width), tf.constant(k))


def test_nbest_in_sub_batches_gives_the_results_of_one_batch(tiny):
    ragged = tiny.source_tokenizer.tokenize(tf.constant(tiny.sentences))
    search = beam.BeamSearch(beam_width=3, max_length=MAX_LENGTH, num_hypotheses=2)
    whole = search(tiny.model, ragged.to_tensor())
    parts = sub_batches.in_sub_batches(tiny.model, search, ragged, 5, num_hypotheses=2)
    np.testing.assert_array_equal(parts.tokens.numpy(), whole.tokens.numpy())
    np.testing.assert_array_equal(parts.lengths.numpy(), whole.lengths.numpy())
    np.testing.assert_allclose(parts.scores.numpy(), whole.scores.numpy(), atol=1e-5)

    @tf.function
    def traced(ids, k):
        search = beam.BeamSearch(beam_width=3, max_length=MAX_LENGTH, num_hypotheses=k)
        return sub_batches.in_sub_batches(tiny.model, search, ids, 5, 2, num_hypotheses=k)

    np.testing.assert_array_equal(traced(ragged, tf.constant(2)).tokens, whole.tokens.numpy())
    assert traced(ragged[:0], tf.constant(2)).tokens.shape == (0, 2, MAX_LENGTH)


def _prefix_search(search, model, ids, prefix, **kwargs):
    if search == "greedy":
        return sampling.greedy_search(model, ids, MAX_LENGTH, prefix=prefix, **kwargs)
    return beam.beam_search(model, ids, 3, MAX_LENGTH, prefix=prefix, **kwargs)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_target_prefix_starts_the_output_and_counts_in_its_score(tiny, search):
    """Each row's output starts with its prefix (rows of other lengths, and none) and its
    score is the model's log-probability of the whole output; an empty prefix gives the
    output of no prefix; a row's limit leaves room for its prefix and [END]; a prefix
    longer than the steps allow is cut."""
    ids = tiny.context_ids
    rows = len(ids)
    plain = _prefix_search(search, tiny.model, ids, None)
    for empty in (tf.zeros([rows, 0], tf.int64), tf.zeros([rows, 3], tf.int64)):
        result = _prefix_search(search, tiny.model, ids, empty)
        np.testing.assert_array_equal(result.tokens.numpy(), plain.tokens.numpy())
        np.testing.assert_array_equal(result.scores.numpy(), plain.scores.numpy())
    # Prefixes of 0 to 3 digits, unlike what the model would say.
    rng = np.random.default_rng(0)
    prefix = rng.integers(4, tiny.target_tokenizer.vocab_size, size=(rows, 3))
    prefix[np.arange(3)[None, :] >= (np.arange(rows) % 4)[:, None]] = 0
    limits = tf.constant(np.where(np.arange(rows) % 2, 1, MAX_LENGTH), tf.int32)
    result = _prefix_search(search, tiny.model, ids, tf.constant(prefix), row_limits=limits)
    tokens, lengths = result.tokens.numpy(), result.lengths.numpy()
    for row in range(rows):
        given = prefix[row][prefix[row] > 0]
        np.testing.assert_array_equal(tokens[row, : len(given)], given)
        assert lengths[row] > len(given) and tokens[row, lengths[row] - 1] == END_ID
        if limits[row] == 1:  # raised to fit the prefix: the prefix, then [END]
            assert lengths[row] == len(given) + 1
    np.testing.assert_allclose(
        result.scores.numpy(), _teacher_forced_scores(tiny.model, ids, tokens, lengths), atol=1e-4
    )
    # The rows without a prefix read as without one.
    free = np.arange(rows) % 4 == 0
    unlimited = _prefix_search(search, tiny.model, ids, tf.constant(prefix))
    np.testing.assert_array_equal(unlimited.tokens.numpy()[free], plain.tokens.numpy()[free])
    # A prefix of every step but the last: cut to leave [END] its step.
    long = np.full((rows, MAX_LENGTH + 4), 5)
    result = _prefix_search(search, tiny.model, ids, tf.constant(long))
    assert np.all(result.tokens.numpy()[:, : MAX_LENGTH - 1] == 5)
    assert np.all(result.lengths.numpy() == MAX_LENGTH)


def test_a_target_prefix_in_sub_batches_and_over_many_rows(tiny):
    """Prefixes follow their rows through the sort by source length, and through greedy
    and beam search's loops over the rows still decoding (many rows)."""
    rows = max(MATMUL_ATTENTION_ROWS, len(tiny.sentences))
    ids = tf.constant(np.resize(tiny.context_ids.numpy(), (rows, tiny.context_ids.shape[1])))
    prefix = np.where(np.arange(4)[None, :] < (np.arange(rows) % 5)[:, None], 7, 0)
    prefix = tf.constant(prefix, tf.int64)
    for search in ("greedy", "beam"):
        cached = _prefix_search(search, tiny.model, ids, prefix)
        uncached = _prefix_search(search, tiny.model, ids, prefix, use_cache=False)
        np.testing.assert_array_equal(cached.tokens.numpy(), uncached.tokens.numpy())
        np.testing.assert_allclose(cached.scores.numpy(), uncached.scores.numpy(), atol=1e-4)
    ragged = tiny.source_tokenizer.tokenize(tf.constant(tiny.sentences))
    ragged_prefix = tf.RaggedTensor.from_tensor(prefix[: len(tiny.sentences)], padding=0)
    search = sampling.GreedySearch(max_length=MAX_LENGTH)
    whole = search(tiny.model, ragged.to_tensor(), prefix=prefix[: len(tiny.sentences)])
    parts = sub_batches.in_sub_batches(tiny.model, search, ragged, 3, prefix=ragged_prefix)
    np.testing.assert_array_equal(parts.tokens.numpy(), whole.tokens.numpy())


def test_no_search_emits_padding_or_start():
    """A model that ranks [PAD] and [START] first still gets neither from any search (as
    transformers' generation never emits padding): [PAD] read back would be padding to
    the masks. Scores stay the model's log-probabilities, not renormalized without them."""
    model = tiny_transformer(vocab_size=30, seed=3)
    bias = model.final_layer.bias.numpy()
    bias[[PAD_ID, START_ID]] = 8.0
    model.final_layer.bias.assign(bias)
    ids = tf.constant(np.random.default_rng(2).integers(4, 30, (6, 5)))
    results = {
        "greedy": sampling.greedy_search(model, ids, 8),
        "sampling": sampling.sample(model, ids, 8, seed=1),
        "beam": beam.beam_search(model, ids, 3, 8, length_penalty_alpha=0.0),
        "nbest": beam.beam_search(model, ids, 3, 8, num_hypotheses=3),
    }
    for name, result in results.items():
        tokens, lengths = result.tokens.numpy(), result.lengths.numpy()
        live = np.arange(tokens.shape[-1]) < lengths[..., None]
        assert not np.isin(tokens[live], [PAD_ID, START_ID]).any(), name
        if name != "nbest":
            expected = _teacher_forced_scores(model, ids, tokens, lengths)
            np.testing.assert_allclose(result.scores.numpy(), expected, atol=SEARCH_SCORE_ATOL)
