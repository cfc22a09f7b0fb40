"""Lesson 6 - never lose a run: a crash-safe training loop graded by fault injection.

Crash safety judged by killing the process, as it fails in production. One fault-injection run
serves the four checks; a worker whose steps are not consecutive is killed, since positions are claims.
"""

from __future__ import annotations

from grader.assignments.lesson6.overhead import check_overhead
from grader.assignments.lesson6.scenario import (
    SAVE_MIN_BYTES,
    SPE,
    Scenario,
    _equal,
    _resume_problem,
    run_scenario,
)
from grader.kit.assignment import Assignment
from grader.kit.checks import CheckFailed, Context, expect, quiz_check

SETUP_SOURCE = """\
import math
import os

import torch

from grader.assignments.lesson6.task import Task"""


def _story(ctx: Context, sc: Scenario) -> None:
    for note in sc.notes:
        ctx.ok(note)
    for k, life in enumerate(sc.lives, 1):
        start = "from scratch" if not life.first else f"resumed at step {life.first}"
        ctx.ok(
            f"worker {k}: {start}, {life.end or life.failure}"
            + (f" ({life.torn})" if life.torn else "")
        )


def check_resume(ctx: Context) -> None:
    sc = run_scenario(ctx)
    expect(not sc.problem, sc.problem)
    first = sc.lives[0]
    expect(not first.failure, first.failure)
    _story(ctx, sc)
    problem = _resume_problem(sc)
    expect(not problem, problem)
    expect(sc.final is not None, "the run never finished")
    ref = sc.ref
    if not (_equal(sc.final, ref["best"]) or _equal(sc.final, ref["last"])):
        diff = max(
            float((sc.final[k].double() - ref["best"][k].double()).abs().max())
            for k in ref["best"]
            if k in sc.final
        )
        raise CheckFailed(
            f"after {len(sc.lives) - 1} kills and restarts your final weights differ from the grader's uninterrupted "
            f"run (max |difference| {diff:.2e} from its best weights). A resumed run is bit-equal only if the "
            "checkpoint holds everything its future depends on: model, optimizer (momentum), scheduler, the torch "
            "RNG state (dropout), the epoch and the next batch, and the early-stopping counters"
        )
    ctx.ok(
        f"final weights equal the uninterrupted run's bit for bit ({ref['epochs']} epochs, seed {sc.seed})"
    )


def check_torn(ctx: Context) -> None:
    sc = run_scenario(ctx)
    expect(not sc.problem, sc.problem)
    expect(not sc.lives[0].failure, sc.lives[0].failure)
    saves = [k for k, life in enumerate(sc.lives) if life.kind == "save" and life.torn]
    expect(
        bool(saves),
        "the grader never caught your run writing a checkpoint after a restart (a file of "
        f"{SAVE_MIN_BYTES / 1e6:.1f} MB or more in ckpt_dir or a folder inside it): save the model's "
        "weights and the rest of the state at least once per epoch",
    )
    k = saves[-1]
    ctx.ok(f"killed during a save after step {sc.lives[k].done}: {sc.lives[k].torn}")
    after = sc.lives[k + 1] if k + 1 < len(sc.lives) else None
    expect(after is not None, "the run did not continue after the kill mid-save")
    if after.failure:
        raise CheckFailed(
            f"after the kill in the middle of a save, the restarted {after.failure}. A save interrupted "
            "half-way must never destroy or replace the last complete checkpoint: write to a temporary "
            "file, flush and os.fsync it, then os.replace it onto the final name"
        )
    if after.first is not None and after.first < sc.lives[k].done - SPE:
        raise CheckFailed(
            f"after the kill in the middle of a save (step {sc.lives[k].done} done) the run began again at "
            f"step {after.first}: the interrupted save destroyed the last complete checkpoint. Write to a "
            "temporary file, fsync, then os.replace onto the name"
        )
    ctx.ok(f"the next worker resumed at step {after.first} from a complete checkpoint")


def check_best(ctx: Context) -> None:
    sc = run_scenario(ctx)
    expect(not sc.problem, sc.problem)
    expect(not sc.lives[0].failure, sc.lives[0].failure)
    expect(
        sc.final is not None,
        "the run never finished, so there are no final weights to judge (see test_resume)",
    )
    ref = sc.ref
    if _equal(sc.final, ref["best"]):
        ctx.ok(
            f"early stopping fired after epoch {ref['epochs']}; you kept epoch {ref['best_epoch'] + 1}'s weights, the best"
        )
        return
    if _equal(sc.final, ref["last"]):
        raise CheckFailed(
            f"early stopping fired after epoch {ref['epochs']} and you kept that epoch's weights; the best "
            f"validation loss was epoch {ref['best_epoch'] + 1}'s. Save the best weights when they "
            "happen (best.pt) and load them before returning"
        )
    raise CheckFailed(
        "your final weights are neither the best nor the last of the grader's run (see test_resume)"
    )


def _overhead(ctx: Context) -> None:
    check_overhead(ctx)


CELL_CHECKS = {
    "test_resume": check_resume,
    "test_torn": check_torn,
    "test_best": check_best,
    "test_overhead": _overhead,
    "test_quiz": quiz_check("lesson6", ("q1", "q2", "q3", "q4")),
}
NAMES = ("train",)
ASSIGNMENT = Assignment("lesson6", "train", SETUP_SOURCE, CELL_CHECKS, timeout_s=180)
