"""Lesson 5 - activation checkpointing, graded out of the kernel: gradients, bytes and time.

**What it does.** The learner writes ``checkpointed_forward(blocks, x, plan)`` (run ``x`` through
the blocks, checkpointing those the plan names, selectively when it names ops to save) and
``plan_checkpointing(blocks, x, budget_bytes)`` (choose a plan, as plain data, that fits the
budget with as little recompute as possible).

* ``test_gradients`` (3 points): in the sandboxed worker (:mod:`grader.assignments.lesson5.probes`) the
  learner's forward runs on the grader's seeded stack (dropout on) and batch (no
  ``requires_grad``: the reentrant trap), under two plans drawn per grading (some blocks; every
  block keeping its matmuls). The worker returns output and gradients as raw tensor bytes; this
  process computes the plain stack's own and compares (relative error <= 1e-5). A miss is named:
  missing gradients (``use_reentrant=True``), the gradients of a recompute without the RNG state
  (recomputed here to match), blocks the forward counts show were not checkpointed.
* ``test_budget`` (2 points): two budgets drawn per grading (a loose one, 55-65% of the plain
  stack's activations, and a tight one, 8-15%). The worker returns the learner's plan **as
  JSON**; this process validates it (`effkit.checkpoint_plan.CheckpointPlan.from_data`: block
  indices, op names the stack really runs), applies it with effkit's implementation to *its own*
  stack and measures the bytes kept for backward itself (``saved_activation_bytes``).
* ``test_speed`` (2 points) and ``test_least_recompute`` (1 point): the plan for the loose
  budget, timed once in this process against "checkpoint everything" and against the grader's
  own plan (`plan_for_budget`: the fewest blocks that fit), interleaved rounds, one thread,
  medians with order-statistic intervals (`ckpt_checks.time_plans`). ``test_speed``: the
  learner's plan is faster than "everything" (its interval above 1). ``test_least_recompute``:
  it recovers at least 80% of the grader's plan's measured gain (a plan with one block more than
  needed recovers ~60%).
* ``test_quiz`` (2 points).

**Trust.** Saved bytes measured *inside* a worker that ran learner code are forgeable (it can
patch the hooks), and so would be any timing it reported: no byte count and no time crosses from
the worker. The plan is data; bytes and time are produced here, where no learner code ran, on the
parent's own stack. Gradients cross as raw bytes and are checked against this process's own
reference, so forging them means computing them. The worker's forward counts are claims that
can only *deny* points (an honest forward that ignores its plan is told so); they never earn any.

**Pitfalls.** The timing runs in the grading process (nbgrader's, or ``grader check``'s): keep
the machine otherwise quiet, as for lessons 2-3. Calibration figures: ``grader/README.md``.
"""

from __future__ import annotations

import torch

from effkit.act_checkpoint import MATMUL_OPS
from effkit.checkpoint_plan import CheckpointPlan, PlanError, plan_bytes, plan_for_budget
from grader.assignments import Assignment
from grader.assignments.lesson5 import ckpt_checks as cc
from grader.cells import CheckFailed, Context, expect, stub_reason
from grader.channel import ChannelError, tensor_from
from grader.quiz import quiz_check

CALL_SECONDS = 60.0
TOLERANCE = 1e-5  # relative gradient error: checkpointing changes no arithmetic
MATCH = 1e-4  # "your gradient is what this mistake gives"
LOOSE, TIGHT = (0.55, 0.65), (0.08, 0.15)  # budgets, as fractions of the plain stack's bytes
ROUNDS, STEPS = 11, 1  # timed rounds (11: the interval drops the extreme ratio on each side)
MAX_ROUNDS = 44  # on a noisy machine, 11 more rounds at a time until the intervals clear 1
# Share of the grader's plan's measured gain over "checkpoint everything" that earns
# test_least_recompute (calibrated: README); a share within SHARE_MARGIN of it buys more rounds.
MIN_SHARE, SHARE_MARGIN = 0.8, 0.1

SETUP_SOURCE = """\
import functools

import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy

from effkit.act_checkpoint import saved_activation_bytes"""

QUIZ_KEY = {  # the notebook holds only the questions
    "q1": "b",  # mixed-precision Adam: ~16 bytes per parameter -> 16 GB for 1B
    "q2": "b",  # use_reentrant=True, input without requires_grad: no gradients for the block
    "q3": "a",  # keep matmuls: more memory than full checkpointing, fewer FLOPs recomputed
    "q4": "b",  # activations ~ input size: sqrt(16) = 4 segments
}

REFERENCE_NAMES = ("plan_for_budget", "apply_plan", "checkpoint_modules", "run_segments")


def _refuse_reference(ctx: Context) -> None:
    source = "\n".join(src for _, src in ctx.session.cells)
    used = [n for n in REFERENCE_NAMES if n in source]
    if used:
        raise CheckFailed(
            f"your solution uses effkit's {used[0]}, the lesson's reference answer: write it "
            "yourself with torch.utils.checkpoint"
        )


def _tensor(meta, raw: bytes, what: str) -> torch.Tensor:
    try:
        return tensor_from(meta if isinstance(meta, dict) else {}, raw)
    except ChannelError as err:
        raise CheckFailed(f"the worker sent a malformed {what} ({err})") from err


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def _forward_plans(ctx: Context, ops: frozenset[str]) -> list[CheckpointPlan]:
    some = sorted(
        {0, *ctx.rng.sample(range(1, cc.N_BLOCKS), 2)}
    )  # block 0: fed data, the reentrant trap
    return [
        CheckpointPlan(tuple(some)),
        CheckpointPlan(tuple(range(cc.N_BLOCKS)), tuple(sorted(MATMUL_OPS & ops))),
    ]


def _diagnose(data: dict, got: torch.Tensor, seed: int, rng_seed: int, plan: CheckpointPlan) -> str:
    missing = data.get("missing") or []
    if missing:
        return (f"{len(missing)} parameters got no gradient (e.g. {str(missing[0])[:40]}): with use_reentrant=True "
                "a checkpointed block whose input does not require grad (block 0 is fed data) passes no gradient "
                "to its parameters. Use checkpoint(..., use_reentrant=False)")  # fmt: skip
    _, no_rng = cc.reference_grads(seed, rng_seed, plan, preserve_rng_state=False)
    if _rel(got, no_rng) < MATCH:
        return (
            "they are exactly the gradients of a recompute that draws new dropout masks: keep "
            "preserve_rng_state=True (the default) so the recompute replays the forward's random numbers"
        )
    return "check that every block runs exactly once in forward, in order, on the previous block's output"


def _plan_calls_hint(data: dict, plan: CheckpointPlan) -> str:
    fwd, total = data.get("forward_calls"), data.get("calls")
    if not (isinstance(fwd, list) and isinstance(total, list) and len(total) == cc.N_BLOCKS):
        return ""
    if not any(isinstance(c, int) and c > 0 for c in total):
        return ""  # blocks called through .forward: hooks cannot see them
    skipped = [i for i in plan.blocks if total[i] == fwd[i]]
    extra = [i for i in range(cc.N_BLOCKS) if i not in plan.blocks and total[i] != fwd[i]]
    if skipped:
        return (f"the gradients are right, but blocks {skipped} of the plan ran only in forward: they were not "
                "checkpointed (a checkpointed block runs again in backward)")  # fmt: skip
    if extra:
        return f"the gradients are right, but blocks {extra} are not in the plan and were recomputed in backward"
    return ""


def check_gradients(ctx: Context) -> None:
    _refuse_reference(ctx)
    seed = ctx.rng.randrange(1 << 20)
    ops = cc.ops_in(cc.build_stack(seed), cc.draw_batch(seed + 1)[0])
    for plan in _forward_plans(ctx, ops):
        rng_seed = ctx.rng.randrange(1 << 20)
        shown = f"checkpointed_forward(blocks, x, {plan.to_data()})"
        r = ctx.session.call(
            "forward", CALL_SECONDS, seed=seed, rng_seed=rng_seed, plan=plan.to_data()
        )
        if not r.ok:
            raise CheckFailed(stub_reason(r.failure) or f"{shown} {r.failure}")
        expect(len(r.blobs) == 2, "the worker's answer was malformed")
        out = _tensor(r.data.get("out"), r.blobs[0], "output")
        got = _tensor(r.data.get("grads"), r.blobs[1], "gradient")
        want_out, want = cc.reference_grads(seed, rng_seed)
        expect(
            got.shape == want.shape and out.shape == want_out.shape,
            "the worker's answer was malformed",
        )
        err = _rel(got, want)
        if not err <= TOLERANCE:
            why = _diagnose(r.data, got, seed, rng_seed, plan)
            raise CheckFailed(
                f"{shown}: the gradients differ from the plain stack's by {err:.1%}: {why}."
            )
        expect(_rel(out, want_out) <= TOLERANCE, f"{shown}: the gradients are right but the output differs from "
                                                 "the plain stack's: return the last block's output")  # fmt: skip
        hint = _plan_calls_hint(r.data, plan)
        expect(not hint, f"{shown}: {hint}")
        ctx.ok(
            f"{plan.describe(cc.N_BLOCKS)}: gradients equal to the plain stack's (relative error {err:.0e})"
        )


def _budgets(ctx: Context, plain: int) -> dict[str, int]:
    return {
        name: int(plain * ctx.rng.uniform(*bounds))
        for name, bounds in (("loose", LOOSE), ("tight", TIGHT))
    }


def _learner_plan(ctx: Context, seed: int, budget: int, ops: frozenset[str]) -> CheckpointPlan:
    r = ctx.session.call("plan", CALL_SECONDS, seed=seed, budget_bytes=budget)
    if not r.ok:
        raise CheckFailed(
            stub_reason(r.failure) or f"plan_checkpointing(blocks, x, {budget:,}) {r.failure}"
        )
    try:
        return CheckpointPlan.from_data(r.data.get("plan"), cc.N_BLOCKS, ops)
    except PlanError as err:
        raise CheckFailed(
            f"plan_checkpointing(blocks, x, {budget:,}) returned a plan the grader cannot apply: {err}"
        ) from None


def _fitting_plan(ctx: Context, name: str) -> tuple[object, torch.Tensor, CheckpointPlan, int, int]:
    """(stack, x, the learner's plan, its measured bytes, the budget) for the ``name`` budget."""
    seed = ctx.rng.randrange(1 << 20)
    stack, (x, _) = cc.build_stack(seed), cc.draw_batch(seed + 1)
    plain = plan_bytes(stack, x, CheckpointPlan())
    budget = _budgets(ctx, plain)[name]
    plan = _learner_plan(ctx, seed, budget, cc.ops_in(stack, x))
    kept = plan_bytes(stack, x, plan)
    if kept > budget:
        advice = ("the plain stack" if not plan.blocks else
                  "checkpoint more blocks" if plan.save is None else
                  "checkpoint more blocks, or keep fewer ops")  # fmt: skip
        raise CheckFailed(f"budget {budget / 2**20:.2f} MiB ({budget / plain:.0%} of the plain stack's {plain / 2**20:.2f}"
                          f" MiB): your plan ({plan.describe(cc.N_BLOCKS)}) keeps {kept / 2**20:.2f} MiB, measured by "
                          f"the grader on its own copy — over budget" + ("" if not plan.blocks else f"; {advice}")
                          + ". Measure what each block keeps (saved_activation_bytes) and plan from it.")  # fmt: skip
    return stack, x, plan, kept, budget


def check_budget(ctx: Context) -> None:
    _refuse_reference(ctx)
    for name in ("loose", "tight"):
        _, _, plan, kept, budget = _fitting_plan(ctx, name)
        ctx.ok(f"{name} budget {budget / 2**20:.2f} MiB: your plan ({plan.describe(cc.N_BLOCKS)}) keeps "
               f"{kept / 2**20:.2f} MiB (measured by the grader)")  # fmt: skip


def _timing(ctx: Context) -> dict:
    """Time the learner's loose-budget plan once per grading (both speed cells read it). Cached
    on the parent's session object: a failure (over budget, a bad plan) is cached too."""
    cache = ctx.session.__dict__.setdefault("_lesson5_timing", {})
    if not cache:
        try:
            stack, x, plan, _, budget = _fitting_plan(ctx, "loose")
        except CheckFailed as err:
            cache["failed"] = f"no speed credit: {err}"
            raise
        best = plan_for_budget(stack, x, budget)
        plans = {
            "everything": CheckpointPlan.everything(cc.N_BLOCKS),
            "yours": plan,
            "grader": best,
        }

        def settled(t: dict) -> bool:
            """The grader's plan clear of 1; unless the plan is a known one, its interval clear
            of 1 and its share of the grader's gain clear of the threshold by 0.1 too."""
            if not t["grader"]["low"] > 1.0:
                return False
            if plan in (best, plans["everything"]):
                return True
            share = (t["yours"]["ratio"] - 1) / (t["grader"]["ratio"] - 1)
            clear = not t["yours"]["low"] <= 1.0 <= t["yours"]["high"]
            return clear and abs(share - MIN_SHARE) >= SHARE_MARGIN

        cache.update(
            plan=plan,
            best=best,
            t=cc.time_plans(stack, x, plans, ROUNDS, STEPS, MAX_ROUNDS, settled),
        )
    if "failed" in cache:
        raise CheckFailed(cache["failed"])
    t, plan, best = cache["t"], cache["plan"], cache["best"]
    ctx.lines.append(f"  timed here ({t['yours']['rounds']} interleaved rounds, one thread): checkpoint everything "
                     f"{t['everything']['step_s'] * 1e3:.0f} ms/step, your plan {t['yours']['step_s'] * 1e3:.0f} ms, "
                     f"the grader's plan ({best.describe(cc.N_BLOCKS)}) {t['grader']['step_s'] * 1e3:.0f} ms")  # fmt: skip
    return cache


def _interval(r: dict) -> str:
    return f"{r['ratio']:.2f}x, interval {r['low']:.2f}-{r['high']:.2f} covering the median {r['coverage']:.0%} of the time"


def check_speed(ctx: Context) -> None:
    """Faster than checkpointing every block: the plan's interval lies above 1."""
    _refuse_reference(ctx)
    timing = _timing(ctx)
    plan, best, yours, grader = (
        timing["plan"],
        timing["best"],
        timing["t"]["yours"],
        timing["t"]["grader"],
    )
    if plan == CheckpointPlan.everything(cc.N_BLOCKS):
        raise CheckFailed(f"your plan checkpoints every block: it fits, but recomputes all of them. The budget needed "
                          f"{len(best.blocks)} blocks: the grader's plan ran {grader['ratio']:.2f}x as fast as "
                          "checkpointing everything. Checkpoint only what the budget needs.")  # fmt: skip
    expect(yours["low"] > 1.0, f"your plan ({plan.describe(cc.N_BLOCKS)}) was not measurably faster than checkpointing "
                               f"every block: {_interval(yours)}"
                               + ("; keeping ops selectively adds a dispatch cost per op that the recompute it "
                                  "saves does not pay back here" if plan.save is not None else ""))  # fmt: skip
    ctx.ok(f"your plan ran {_interval(yours)} as fast as checkpointing every block")


def check_least_recompute(ctx: Context) -> None:
    """At least MIN_SHARE of the gain the grader's own plan (fewest blocks) measured over
    checkpointing everything, in the same interleaved rounds."""
    _refuse_reference(ctx)
    timing = _timing(ctx)
    plan, best, yours, grader = (
        timing["plan"],
        timing["best"],
        timing["t"]["yours"],
        timing["t"]["grader"],
    )
    gain = grader["ratio"] - 1
    if (
        grader["low"] <= 1.0
    ):  # the timing could not show the grader's own plan faster: judge by structure
        expect(len(plan.blocks) <= len(best.blocks) and plan.save == best.save,
               f"your plan ({plan.describe(cc.N_BLOCKS)}) checkpoints more than the grader's ({best.describe(cc.N_BLOCKS)}) "
               "(the timing here was inconclusive): recompute only what the budget needs")  # fmt: skip
        ctx.ok(
            f"your plan recomputes no more than the grader's (timing inconclusive: {_interval(grader)})"
        )
        return
    share = (yours["ratio"] - 1) / gain
    expect(share >= MIN_SHARE,
           f"your plan ({plan.describe(cc.N_BLOCKS)}) recovered {max(share, 0):.0%} of the speed the grader's plan "
           f"({best.describe(cc.N_BLOCKS)}) gained over checkpointing everything ({_interval(yours)} vs "
           f"{grader['ratio']:.2f}x); at least {MIN_SHARE:.0%} earns this point: recompute only what the budget needs")  # fmt: skip
    ctx.ok(
        f"your plan recovered {share:.0%} of the grader's plan's gain ({grader['ratio']:.2f}x over everything)"
    )


CELL_CHECKS = {"test_gradients": check_gradients, "test_budget": check_budget, "test_speed": check_speed,
               "test_least_recompute": check_least_recompute, "test_quiz": quiz_check(QUIZ_KEY)}  # fmt: skip
NAMES = ("checkpointed_forward", "plan_checkpointing")


ASSIGNMENT = Assignment(id="lesson5", notebook="lesson5", object_name="plan_checkpointing",
                        performance_cell=None, setup_cell="setup", setup_source=SETUP_SOURCE,
                        runtime_module="", timeout_s=180, probes="grader.assignments.lesson5.probes",
                        names=NAMES, cell_checks=CELL_CHECKS)  # fmt: skip
