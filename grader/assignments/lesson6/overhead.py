"""Lesson 6: what the learner's checkpointing costs, judged on the epochs the fault injection timed.

The judged runs are the timed runs, so code cannot save differently when timed. ``LIMIT`` is
calibrated (grader/assignments/lesson6/README.md); fewer than ``MIN_PAIRS`` timed epochs give no verdict.
"""

from __future__ import annotations

import statistics

from effkit.abtest import ABResult, median_ci, median_ci_coverage, verdict
from grader.assignments.lesson6 import scenario as lesson6
from grader.kit.checks import CheckFailed, Context, expect

LIMIT = 2.0  # the protected run may take at most this many times the unprotected one
MIN_PAIRS = 6  # [min, max] of 6 covers the median 97% of the time; the reference has 10 or more (MIN_EPOCHS = 8)
CONFIDENCE = 0.95


def judge(pairs: list[tuple[float, float]]) -> ABResult:
    """The median speed ratio checkpointed/unprotected over the half-epochs, with its interval."""
    ratios = [bare / learner for bare, learner in pairs]
    lo, hi = median_ci(ratios, CONFIDENCE)
    return ABResult(
        ratio=statistics.median(ratios),
        ci_low=lo,
        ci_high=hi,
        confidence=CONFIDENCE,
        pairs=len(ratios),
        a_speeds=[1 / b for b, _ in pairs],
        b_speeds=[1 / t for _, t in pairs],
        ratios=ratios,
        seconds=sum(b + t for b, t in pairs),
        coverage=median_ci_coverage(len(ratios), CONFIDENCE),
    )


def check_overhead(ctx: Context) -> None:
    sc = lesson6.run_scenario(ctx)
    expect(not sc.problem, sc.problem)
    expect(not sc.lives[0].failure, sc.lives[0].failure)
    resumed = (
        sc.final is not None
        and not lesson6._resume_problem(sc)
        and (lesson6._equal(sc.final, sc.ref["best"]) or lesson6._equal(sc.final, sc.ref["last"]))
    )
    expect(
        resumed, "the overhead is measured only for a run that survives the kills (see test_resume)"
    )
    if sc.folder is not None:
        sc.folder.close()
    if sc.timing_failure:
        raise CheckFailed(
            f"the grader's own run failed ({sc.timing_failure}): a grader bug, report it"
        )
    expect(
        len(sc.pairs) >= MIN_PAIRS,
        f"the grader timed only {len(sc.pairs)} complete half-epochs of your workers "
        f"(at least {MIN_PAIRS} are needed): train every batch of each epoch, in order",
    )
    result = judge(sc.pairs)
    slowdown, low, high = 1 / result.ratio, 1 / result.ci_high, 1 / result.ci_low
    said = verdict(
        result, "the run without checkpoints", "your checkpointed run", threshold=1 / LIMIT
    )
    shown = (
        f"your checkpointed run took {slowdown:.2f}x the time of the same steps without checkpoints "
        f"(interval {low:.2f}-{high:.2f}x, covering the median {result.coverage:.0%} of the time over "
        f"{result.pairs} half-epochs of the killed and restarted runs)"
    )
    if said.word == "slower":
        raise CheckFailed(
            f"{shown}: more than the limit of {LIMIT}x. Saving costs a full serialisation of the model "
            "and optimizer each time: save once or twice per epoch, not every step"
        )
    ctx.ok(f"{shown}; limit {LIMIT}x")
