"""Calibrate lesson 8's recipe cell: LoRA recipes against the grader's full fine-tuning, per drawn budget.

Runs the grader's own task (``grader.assignments.lesson8.lora_task.finetune``: the packaged
all-MiniLM-L6-v2 on negated sentiment sentences, 80 AdamW steps of 16, 12 tokens, one thread).
``MARGIN`` and ``RANK_ROOM`` in ``recipe_checks.py`` come from these figures
(grader/assignments/lesson8/README.md). Three modes:

    python grader/assignments/lesson8/calibration/lesson8_calibrate.py --gradings 0 1 2 3     # whole gradings, as check_recipe draws them
    python grader/assignments/lesson8/calibration/lesson8_calibrate.py --floor 11 12 13 14    # the lowest drawn rank on each offer
    python grader/assignments/lesson8/calibration/lesson8_calibrate.py --ceiling 11 12 13     # the highest drawn rank on each offer
    python grader/assignments/lesson8/calibration/lesson8_calibrate.py 11 12 13 14            # recipe mistakes on task seeds

``--gradings G...`` runs ``recipe_checks.check_recipe`` itself with ``random.Random(G)`` as its
draws (the budget, then the task) for the reference solution's ``lora_recipe`` and for the lesson's
constants, and prints each verdict with its first line of reason.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import torch

from effkit.measure import device_name
from grader.assignments.lesson8 import lora_task as lt
from grader.assignments.lesson8 import recipe_checks as rc
from grader.sandbox.probe import CallResult
from grader.scoring.checks import CheckFailed, Context

ROOT = Path(__file__).resolve().parents[4]  # grader/assignments/<lesson>/calibration/
LESSON = {"target_modules": ["query", "value"], "r": 8, "lora_alpha": 16, "lr": 1e-3}
RECIPES = {  # each a change to the lesson's recipe
    "lesson (q,v r8 a16 lr1e-3)": LESSON,
    "full fine-tuning's LR (5e-5)": {**LESSON, "lr": 5e-5},
    "alpha 1 at r 8 (scale 1/8)": {**LESSON, "lora_alpha": 1},
    "no attention (FFN dense only)": {**LESSON, "target_modules": ["intermediate.dense"]},
    "rank 1 (q,v a2 lr1e-3)": {**LESSON, "r": 1, "lora_alpha": 2},
}


def reference_recipe():
    """The solution's ``lora_recipe``, executed from its source cell (the function the grader gets)."""
    src = (ROOT / "solutions" / "lesson8" / "lesson8.py").read_text()
    start = src.index("def lora_recipe(budget):")
    ns: dict = {}
    exec(src[start : src.index("### END SOLUTION", start)], ns)
    return ns["lora_recipe"]


class _Answers:
    """The session a check talks to: the recipe function's answer to the drawn budget."""

    def __init__(self, fn):
        self.fn = fn

    def call(self, probe, timeout_s, **args):
        return CallResult(True, {"recipe": self.fn(args["budget"])})


def gradings(seeds: list[int]) -> None:
    for g in seeds:  # both recipes on one grading's draws, so its full fine-tuning is cached once
        for name, fn in (
            ("reference", reference_recipe()),
            ("lesson's constants", lambda b: LESSON),
        ):
            ctx, start = Context(_Answers(fn), random.Random(g)), time.perf_counter()
            try:
                rc.check_recipe(ctx)
                verdict = "PASS " + ctx.lines[-1].strip()
            except CheckFailed as err:
                verdict = f"FAIL {str(err)[:240]}"
            print(
                f"grading {g} [{name}] {ctx.lines[0].strip() if ctx.lines else ''}\n  {verdict} "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )


def floor(seeds: list[int], low: int) -> None:
    """The reference's choice at rank ``low`` (the lowest or highest a budget allows), on each pair."""
    for seed in seeds:
        full = lt.full_finetune(seed)
        print(
            f"seed {seed}: full fine-tuning acc {full['acc']:.3f}, {full['seconds']:.1f} s",
            flush=True,
        )
        for pair in (("query", "value"), ("key", "value"), ("query", "key")):
            recipe = {"target_modules": list(pair), "r": low, "lora_alpha": 2 * low, "lr": 1e-3}
            run = lt.finetune(seed, recipe)
            print(
                f"  {'+'.join(pair):12} r {low}: acc {run['acc']:.3f} gap "
                f"{100 * (full['acc'] - run['acc']):5.1f} pp  {run['bytes']:,} bytes  {run['seconds']:.1f} s",
                flush=True,
            )


def mistakes(seeds: list[int]) -> None:
    for seed in seeds:
        full = lt.full_finetune(seed)
        print(
            f"seed {seed}: full fine-tuning acc {full['acc']:.3f}, {full['seconds']:.1f} s",
            flush=True,
        )
        for name, recipe in RECIPES.items():
            run = lt.finetune(seed, recipe)
            print(
                f"  {name:32} acc {run['acc']:.3f} gap {100 * (full['acc'] - run['acc']):5.1f} pp  "
                f"{run['bytes'] / 2**20:6.2f} MiB ({run['bytes'] / full['bytes']:.2%})",
                flush=True,
            )


if __name__ == "__main__":
    args = sys.argv[1:]
    seeds = [int(s) for s in args if s.isdigit()]
    print(
        f"device: {device_name(torch.device('cpu'))}; {lt.STEPS} steps of {lt.BATCH}, {lt.MAX_LEN} tokens; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    if "--gradings" in args:
        gradings(seeds or [0, 1, 2, 3])
    elif "--floor" in args:
        floor(seeds or [11, 12, 13, 14], int(rc.RANK_ROOM[0]))
    elif "--ceiling" in args:  # the room is drawn below RANK_ROOM[1]: its rank is one less
        floor(seeds or [11, 12, 13], int(rc.RANK_ROOM[1]) - 1)
    else:
        mistakes(seeds or [11, 12, 13])
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
