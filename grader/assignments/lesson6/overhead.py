"""Lesson 6: what the learner's checkpointing costs, timed against the same run without it.

**What it does.** ``check_overhead`` (``test_overhead``) times, interleaved (ABBA, by
:func:`effkit.abtest.compare`, on this process's clock), the grader's own loop with no checkpoints
in a sandboxed worker that holds no learner code (A), against the learner's ``train`` on the same
seed, uninterrupted, in the learner's worker with an emptied checkpoint folder (B). Both go through
the same per-step go-ahead from the parent, so both pay the same messages. The timed runs are cut
to ``EPOCHS`` epochs (``task.max_epochs``), and each of the learner's must end with the weights of
the grader's own run of that length. It fails only when the whole interval of the median
time ratio lies beyond ``LIMIT`` (:func:`effkit.abtest.verdict`), and it is judged only for a run
that resumed correctly (``test_resume``): the overhead of a broken checkpoint means nothing.

**When to use it.** Lesson 6's fifth cell check, after :func:`grader.assignments.lesson6.checks.run_scenario`.

**Expected gain.** "Save every step" fails with its measured cost; saving once or twice per epoch
passes whatever the machine's speed, since both runs share it.

**Pitfalls.** ``LIMIT`` was calibrated under ``/work/wt/bin/quiet`` on the 2-core CPU CI machine
(figures in grader/README.md): the reference answer (two saves and a best per epoch) and "save every
step" sit on either side of it with room for the noise of a shared machine.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from effkit.abtest import compare, verdict
from grader.assignments.lesson6.task import reference_run
from grader.cells import CheckFailed, Context, expect
from grader.probe import ProbeSession

LIMIT = 2.0  # the protected run may take at most this many times the unprotected one
EPOCHS = 3  # timed runs are cut to this many epochs: the cost per epoch is what is compared
PAIRS = 6  # [min, max] of 6 pairs covers the median 97% of the time
CALL_SECONDS = 60.0


def _clear(folder: Path) -> None:
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def check_overhead(ctx: Context) -> None:
    from grader.assignments.lesson6 import (
        checks as lesson6,
    )  # the scenario (it imports this module)

    sc = lesson6.run_scenario(ctx)
    expect(not sc.problem, sc.problem)
    expect(not sc.lives[0].failure, sc.lives[0].failure)
    resumed = sc.final is not None and not lesson6._resume_problem(sc) and (
        lesson6._equal(sc.final, sc.ref["best"]) or lesson6._equal(sc.final, sc.ref["last"]))  # fmt: skip
    expect(
        resumed, "the overhead is measured only for a run that survives the kills (see test_resume)"
    )
    expect(
        sc.state is not None and sc.state.is_dir(),
        "the grader lost its checkpoint folder (a grader bug)",
    )
    probes = ctx.session.probes
    bare = ProbeSession(probes, ctx.session.setup, [], [], grader_only=True)  # no learner cell: a uid of its own
    ok = lambda msg: {}  # noqa: E731 - the go-ahead, at once: both runs pay the same messages
    mismatched: list[str] = []
    want = reference_run(sc.seed, EPOCHS)  # what the shortened run must end with

    def unprotected():
        r = bare.call("bare", CALL_SECONDS, ok, seed=sc.seed, max_epochs=EPOCHS)
        if not r.ok:
            raise CheckFailed(f"the grader's own run failed ({r.failure}): a grader bug, report it")
        return 1

    def protected():
        _clear(sc.state)
        r = ctx.session.call("timed", CALL_SECONDS, ok, seed=sc.seed, max_epochs=EPOCHS)
        if not r.ok:
            raise CheckFailed(f"train(task, ckpt_dir), run without kills, {r.failure}")
        if not any(lesson6._equal(lesson6._weights(r), want[k]) for k in ("best", "last")):
            mismatched.append("x")
        return 1

    try:
        result = compare(unprotected, protected, warmup=1, min_pairs=PAIRS, max_pairs=PAIRS)
    finally:
        bare.close()
        sc.folder.close()
    expect(not mismatched, f"timed without kills for {EPOCHS} epochs (task.max_epochs), your train did not end with "
           "the weights of the grader's run: the run must be the same whether or not it is killed")  # fmt: skip
    slowdown, low, high = 1 / result.ratio, 1 / result.ci_high, 1 / result.ci_low
    said = verdict(
        result, "the run without checkpoints", "your checkpointed run", threshold=1 / LIMIT
    )
    shown = (f"your checkpointed run took {slowdown:.2f}x the time of the same run without checkpoints "
             f"(interval {low:.2f}-{high:.2f}x, covering the median {result.coverage:.0%} of the time over "
             f"{result.pairs} pairs)")  # fmt: skip
    if said.word == "slower":
        raise CheckFailed(f"{shown}: more than the limit of {LIMIT}x. Saving costs a full serialisation of the model "
                          "and optimizer each time: save once or twice per epoch, not every step")  # fmt: skip
    ctx.ok(f"{shown}; limit {LIMIT}x")
