"""effkit.seed_compare: a few seeds per recipe, and what their ordering can say."""

from __future__ import annotations

import itertools
import math

import pytest

from effkit.seed_compare import seed_range, separation


def test_separation_p_is_the_share_of_orderings_with_that_side():
    """1/C(2n, n): count it by brute force over every way to split 6 ranks into 3 and 3."""
    splits = list(itertools.combinations(range(6), 3))
    above = sum(1 for a in splits if max(a) < min(set(range(6)) - set(a)))
    assert separation([1, 2, 3], [4, 5, 6]).p_one_sided == pytest.approx(above / len(splits))
    assert separation([1, 2], [3, 4]).p_one_sided == pytest.approx(1 / 6)


def test_sides_overlap_and_not_reached():
    assert separation([5.0, 6.0, 5.5], [9.0, 10.0, 11.0]).side == "b above"
    assert separation([9.0, 10.0], [5.0, 6.0]).side == "b below"
    assert separation([5.0, 9.0], [6.0, 10.0]).side == "overlap"
    assert separation([5.0, 6.0], [7.0, None]).side == "b above"  # never reached: the latest
    assert separation([None], [None]).side == "overlap"  # two failures order nothing
    assert math.isinf(separation([None], [1.0]).a[0])


def test_words_call_one_seed_each_no_evidence_and_three_evidence():
    one = separation([5.0], [9.0]).words("batch 250", "batch 1000", "later", "earlier")
    assert "not evidence" in one and "50%" in one
    three = separation([5.0, 5.2, 5.1], [9.0, 9.5, 8.8]).words("A", "B", "later", "earlier")
    assert three.startswith("every B run later than every A run") and "p = 0.050" in three
    mixed = separation([5.0, 9.0], [6.0, 10.0]).words("A", "B", "later", "earlier")
    assert "no difference these seeds can show" in mixed


def test_seed_range_prints_a_range_or_one_value():
    assert seed_range([6.0, 5.1, 5.5]) == "5.1-6.0"
    assert seed_range([5.1, None]) == "5.1-not reached"
    assert seed_range([7.25]) == "7.2"
