"""benchmarks/quality.py's validation choices."""

from benchmarks.quality import MAX_LENGTH_PENALTY, average_candidates, search_length_penalty


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
