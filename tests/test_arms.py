"""effkit.arms: interleaved order, ratios paired within one run, and verdicts on seed differences."""

import time

import pytest

from effkit import arms
from effkit.arms import (
    difference_verdict,
    paired_difference,
    round_order,
    rows_half_width,
    time_arms,
)


def test_rounds_alternate_forward_and_back():
    assert round_order("abc", 0) == ["a", "b", "c"] and round_order("abc", 1) == ["c", "b", "a"]


def test_every_arm_runs_once_per_round_in_palindromic_order():
    calls = []

    def arm(name):
        def run():
            calls.append(name)
            return 1

        return run

    result = time_arms({n: arm(n) for n in "abc"}, warmup=1, min_rounds=6)
    assert calls == list("abccba" * 3 + "abc")  # 1 warm-up round, then 6 timed ones
    assert result.rounds == 6 and all(len(s) == 6 for s in result.speeds.values())


def _sleeper(seconds):
    def run():
        time.sleep(seconds)
        return 1

    return run


def test_ratios_are_paired_within_the_run_and_say_faster_only_when_supported():
    """9 rounds, not 6: with 6 the 95% interval is [min, max], and on a busy machine (load 2-5) one
    late wake-up of a 5 ms sleep put its low end at 0.44x; 9 rounds drop one extreme at each end, and
    40/10 ms sleeps make a few ms of wake-up latency a smaller share of each call."""
    result = time_arms(
        {"slow": _sleeper(0.04), "same": _sleeper(0.04), "quick": _sleeper(0.01)}, min_rounds=9
    )
    quick = result.versus("slow", "quick")
    assert quick.pairs == 9 and quick.ci_low > 1.5 and quick.coverage > 0.95
    assert quick.ratios == [
        q / s for s, q in zip(result.speeds["slow"], result.speeds["quick"], strict=True)
    ]
    lo, hi = result.interval("quick")
    assert lo <= result.median("quick") <= hi
    with pytest.raises(ValueError, match="at least two"):
        time_arms({"one": _sleeper(0.001)})


def test_lesson_arms_prints_each_median_and_verdict(monkeypatch, capsys):
    monkeypatch.setenv("EFFKIT_PROFILE", "cpu")
    result = arms.lesson_arms(
        "sleep", {"slow": _sleeper(0.02), "quick": _sleeper(0.005)}, [("slow", "quick")]
    )
    printed = capsys.readouterr().out
    assert "quick is faster than slow" in printed and f"{result.coverage:.0%}" in printed
    assert result.verdicts[("slow", "quick")].word == "faster"
    same = {"one": _sleeper(0.01), "two": _sleeper(0.01)}
    capped = arms.lesson_arms("same", same, [("one", "two")], rel_ci=0.0, max_rounds=7)
    assert capped.rounds == 7, "an interval that never settles stops at max_rounds"
    with pytest.raises(ValueError, match="rounds"):
        arms.lesson_arms("x", {"a": _sleeper(0), "b": _sleeper(0)}, [], rounds=3)


def test_a_difference_is_named_only_when_the_seeds_interval_excludes_zero(monkeypatch):
    monkeypatch.setenv("EFFKIT_PROFILE", "cpu")
    base = [0.80, 0.82, 0.81, 0.79, 0.83, 0.80]
    lower = paired_difference(base, [x - 0.02 for x in base])
    assert lower.ci_high < 0 and lower.coverage > 0.95
    said = difference_verdict(lower, "random", "bucketed")
    assert "bucketed's accuracy is lower than random's" in said and "-2.0 points" in said
    assert "within the held-out rows" in difference_verdict(
        lower, "random", "bucketed", rows_error=0.03
    )
    mixed = paired_difference(
        base, [x + d for x, d in zip(base, [-0.01, 0.02, 0.0, -0.02, 0.01, 0.0], strict=True)]
    )
    said = difference_verdict(mixed, "random", "bucketed", rows_error=0.01)
    assert said.startswith("no accuracy difference") and "not evidence that there is none" in said
    assert "from -2.0 to +2.0 points" in said and "±1.0 points" in said
    monkeypatch.setenv("EFFKIT_PROFILE", "smoke")
    assert "not evidence" in difference_verdict(lower, "random", "bucketed")


def test_rows_half_width_counts_only_disagreements():
    agree = [True] * 50 + [False] * 50
    assert rows_half_width(agree, agree) == 0.0
    a = [True] * 10 + [False] * 90
    b = [False] * 10 + [True] * 10 + [False] * 80  # 10 rows only A gets, 10 only B gets
    assert rows_half_width(a, b) == pytest.approx(1.96 * (20**0.5) / 100)
