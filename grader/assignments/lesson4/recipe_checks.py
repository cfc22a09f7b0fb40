"""Lesson 4 part (b): a big-batch recipe (effective batch, LR, warm-up), graded on the grader's own runs.

The learner's recipe crosses as JSON and this process trains and times it itself against a
baseline, so no learner code can forge an accuracy or a time. Calibrated on one task family:
``MIN_ACCUM``/``MAX_ACCUM`` keep the effective batch near it.
"""

from __future__ import annotations

import math

from grader.assignments.lesson4 import recipe_task as rt
from grader.kit.checks import CheckFailed, Context, expect, stub_reason

CALL_SECONDS = 30.0
MIN_ACCUM, MAX_ACCUM = (
    16,
    32,
)  # 256 to 512 samples per step (calibrated at 256: there both mistakes miss by pp)
MAX_LR = 10.0
SEEDS = 3
MIN_HITS = 2  # tasks on which the recipe must reach the target (one unlucky task forgiven)
BASE_RUN = 49152  # samples the baseline trains to set the target (the recipe's BUDGET is 65536)
GATE_PP = 0.5  # the target: the baseline's held-out accuracy after BASE_RUN samples, minus this
MIN_SHARE = 0.5  # a task the baseline solves before this share of BASE_RUN is redrawn
MAX_DRAWS = 8
MAX_TIME_RATIO = 1.25  # "no slower", less the spread measured for the reference (0.84-1.19x): see grader/assignments/lesson4/README.md
KEYS = ("accum_steps", "lr", "warmup_steps")


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate(answer) -> tuple[int, float, int]:
    """The learner's answer as (accum_steps, lr, warmup_steps), or CheckFailed saying what is wrong."""
    shape = '{"accum_steps": 16, "lr": 0.2, "warmup_steps": 64}'
    if isinstance(answer, dict) and set(answer) == {"not_json"}:
        raise CheckFailed(
            f"choose_recipe returned a {answer['not_json']}, not plain data: return a dict like {shape}"
        )
    expect(
        isinstance(answer, dict),
        f"choose_recipe returned {type(answer).__name__}: return a dict like {shape}",
    )
    expect(
        set(answer) == set(KEYS),
        f"choose_recipe returned the keys {sorted(answer)}; expected exactly "
        f"{list(KEYS)}, e.g. {shape}",
    )
    accum, lr, warmup = (answer[k] for k in KEYS)
    expect(_int(accum), f"accum_steps must be an int, got {accum!r}")
    expect(
        MIN_ACCUM <= accum <= MAX_ACCUM,
        f"accum_steps={accum}: the exercise asks for {MIN_ACCUM} to "
        f"{MAX_ACCUM} micro-batches per optimizer step",
    )
    expect(
        isinstance(lr, int | float) and not isinstance(lr, bool), f"lr must be a number, got {lr!r}"
    )
    expect(
        math.isfinite(lr) and 0 < lr <= MAX_LR,
        f"lr={lr!r}: it must be a finite number in (0, {MAX_LR}]",
    )
    steps = rt.BUDGET // (rt.MICRO_BATCH * accum)
    expect(_int(warmup), f"warmup_steps must be an int (optimizer steps), got {warmup!r}")
    expect(
        0 <= warmup <= steps,
        f"warmup_steps={warmup}: the budget holds {steps} optimizer steps at this "
        f"batch, so 0 to {steps}",
    )
    return accum, float(lr), warmup


def _draw_task(ctx: Context) -> tuple[int, float, tuple[int, float]]:
    """A task, its target and the baseline's (samples, seconds) to that target."""
    for _ in range(MAX_DRAWS):
        seed = ctx.rng.randrange(1 << 20)
        base = rt.run(seed, 1, rt.BASE_LR, 0, target=2.0, stop_at=BASE_RUN)
        target = base.last - GATE_PP / 100
        reached = base.to_target(target)
        if not base.diverged and reached and reached[0] >= MIN_SHARE * BASE_RUN:
            return seed, target, reached
    raise CheckFailed("the grader could not draw a task for its baseline (a grader bug: report it)")


def _why(accum: int, lr: float, warmup: int, runs: list[rt.Run]) -> str:
    batch = rt.MICRO_BATCH * accum
    linear = rt.BASE_LR * batch / rt.MICRO_BATCH
    sqrt = rt.BASE_LR * math.sqrt(batch / rt.MICRO_BATCH)
    if lr < 0.8 * linear:
        rule = (
            " (that is square-root scaling, the rule for Adam)"
            if abs(lr - sqrt) <= 0.1 * sqrt
            else ""
        )
        return (
            f"your LR was not scaled with the batch{rule}: batch {batch} is {batch // rt.MICRO_BATCH}x the base "
            f"batch {rt.MICRO_BATCH}, so each sample moves the weights {linear / lr:.2g}x less than in the "
            f"baseline. For SGD the linear rule gives base_lr x {batch // rt.MICRO_BATCH} = {linear:g}"
        )
    if warmup == 0 or any(r.diverged for r in runs):
        broke = (
            "the loss became infinite"
            if any(r.diverged for r in runs)
            else f"held-out accuracy peaked at {max(r.best for r in runs):.1%}"
        )
        return (
            f"at LR {lr:g} from the very first step {broke}: the early loss surface is sharp (this model "
            f"starts with large logits) and the first big steps throw the weights far off. "
            + (
                "Ramp the LR up over the first steps: warm-up (a few % of the steps)"
                if warmup == 0
                else f"Warm up longer than {warmup} steps"
            )
        )
    if lr > 1.25 * linear:
        return f"your LR {lr:g} is above the linear rule's {linear:g} (base_lr x {batch // rt.MICRO_BATCH}): scale linearly"
    if accum > MIN_ACCUM:
        return (
            f"batch {batch} may be past this task's critical batch: a bigger batch there costs samples; "
            f"try {MIN_ACCUM} micro-batches per step"
        )
    return f"LR {lr:g} (linear rule: {linear:g}) with {warmup} warm-up steps did not get there: check both"


def judge(
    accum: int, lr: float, warmup: int, tasks: list[tuple[float, tuple[int, float], rt.Run]]
) -> list[str]:
    """Report lines for a recipe's runs against the baseline on the same tasks; CheckFailed on a miss.

    ``tasks``: (target, the baseline's (samples, seconds) to it, the recipe's run).
    """
    lines = []
    for i, (target, (n, t), mine) in enumerate(tasks, 1):
        got = (
            f"{mine.samples} samples, {mine.seconds:.2f} s"
            if mine.samples
            else (
                "diverged"
                if mine.diverged
                else f"missed: best {mine.best:.1%} in {rt.BUDGET} samples"
            )
        )
        lines.append(f"task {i}: target {target:.1%}; baseline {n} samples, {t:.2f} s; yours {got}")
    runs = [m for _, _, m in tasks]
    hits = [(t, m) for _, (_, t), m in tasks if m.samples]
    if len(hits) < MIN_HITS:
        raise CheckFailed(
            f"{'; '.join(lines)}. The target was missed within the budget of {rt.BUDGET} samples on "
            f"{len(tasks) - len(hits)} of {len(tasks)} tasks (at most {len(tasks) - MIN_HITS} allowed): "
            f"{_why(accum, lr, warmup, runs)}."
        )
    ratio = sum(m.seconds for _, m in hits) / sum(t for t, _ in hits)
    if ratio > MAX_TIME_RATIO:
        raise CheckFailed(
            f"{'; '.join(lines)}. You reached the target, but in {ratio:.2f}x the baseline's wall "
            f"time: with {accum} micro-batches per step you need about as many samples as the "
            "baseline and fewer optimizer steps, so you should not be slower. "
            f"{_why(accum, lr, warmup, runs)}."
        )
    lines.append(
        f"target reached on {len(hits)} of {len(tasks)} tasks; wall time to it: {ratio:.2f}x the "
        "baseline's (grader's runs, one thread)"
    )
    return lines


def check_recipe(ctx: Context) -> None:
    r = ctx.session.call(
        "recipe",
        CALL_SECONDS,
        micro_batch=rt.MICRO_BATCH,
        base_batch=rt.MICRO_BATCH,
        base_lr=rt.BASE_LR,
        budget_samples=rt.BUDGET,
    )
    if not r.ok:
        raise CheckFailed(stub_reason(r.failure) or f"choose_recipe(...) {r.failure}")
    accum, lr, warmup = validate(r.data.get("recipe"))
    ctx.ok(
        f"recipe: {accum} x {rt.MICRO_BATCH} = batch {rt.MICRO_BATCH * accum}, LR {lr:g}, {warmup} warm-up steps"
    )
    tasks = []
    for _ in range(SEEDS):
        seed, target, base = _draw_task(ctx)
        tasks.append((target, base, rt.run(seed, accum, lr, warmup, target=target)))
    for line in judge(accum, lr, warmup, tasks):
        ctx.ok(line)
