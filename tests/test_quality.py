"""benchmarks/quality.py's validation choices."""

import numpy as np
import pytest

from benchmarks.quality import (
    MAX_LENGTH_PENALTY,
    average_candidates,
    bleu_difference_standard_error,
    choose_length_penalty,
    search_length_penalty,
)


def test_the_length_penalty_grid_stops_when_an_inner_value_wins():
    tried = search_length_penalty(lambda alpha: -abs(alpha - 1.0))
    assert list(tried) == [0.6, 1.0, 1.4]


def test_the_length_penalty_grid_extends_while_its_largest_value_wins():
    tried = search_length_penalty(lambda alpha: -abs(alpha - 2.2))
    assert list(tried) == [0.6, 1.0, 1.4, 1.8, 2.2, 2.6]
    assert max(tried, key=tried.get) == 2.2


def test_the_length_penalty_grid_has_a_ceiling():
    tried = search_length_penalty(lambda alpha: alpha)
    assert max(tried) == MAX_LENGTH_PENALTY


def test_the_averages_tried_double_from_five_up_to_what_the_run_kept():
    assert average_candidates(0) == []
    assert average_candidates(1) == []
    assert average_candidates(3) == [3]
    assert average_candidates(5) == [5]
    assert average_candidates(10) == [5, 10]
    assert average_candidates(12) == [5, 10, 12]
    assert average_candidates(20) == [5, 10, 20]


def test_the_length_penalty_is_the_smallest_within_one_standard_error_of_the_best():
    scores = {0.6: 40.0, 1.0: 40.5, 1.4: 40.8, 1.8: 41.0, 2.2: 39.0}
    assert choose_length_penalty(scores, lambda alpha, best: 0.0) == 1.8  # the best itself
    assert choose_length_penalty(scores, lambda alpha, best: 0.3) == 1.4
    assert choose_length_penalty(scores, lambda alpha, best: 0.5) == 1.0
    assert choose_length_penalty(scores, lambda alpha, best: 2.0) == 0.6
    seen = []
    choose_length_penalty(scores, lambda alpha, best: seen.append(best) or 0.0)
    assert set(seen) == {1.8}  # each error is that of a difference from the best


def _outputs(count, seed):
    """References, and two systems that each drop or swap words in a different share of them."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(50)]
    references = [" ".join(rng.choice(words, size=12)) for _ in range(count)]

    def corrupt(share):
        out = []
        for line in references:
            tokens = line.split()
            if rng.random() < share:
                tokens = tokens[: rng.integers(6, 12)] + [str(rng.choice(words))]
            out.append(" ".join(tokens))
        return out

    return references, corrupt(0.3), corrupt(0.5)


def test_the_standard_error_of_a_bleu_difference_by_paired_bootstrap():
    references, a, b = _outputs(400, seed=0)
    assert bleu_difference_standard_error(a, a, references, "13a") == 0.0
    error = bleu_difference_standard_error(a, b, references, "13a")
    assert error > 0
    # Differences, not scores: the sign of the difference makes no odds.
    assert bleu_difference_standard_error(b, a, references, "13a") == pytest.approx(error)
    # Paired: two outputs that differ in one sentence differ little in every resample.
    changed = next(i for i, (x, y) in enumerate(zip(a, references, strict=True)) if x != y)
    near = [references[i] if i == changed else line for i, line in enumerate(a)]
    assert 0 < bleu_difference_standard_error(a, near, references, "13a") < error / 5
    # The same sentences four times over: a bootstrap's error shrinks as 1/sqrt(sentences).
    larger = bleu_difference_standard_error(a * 4, b * 4, references * 4, "13a")
    assert larger == pytest.approx(error / 2, rel=0.2)
