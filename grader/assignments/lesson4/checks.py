"""Lesson 4 - bigger batches: gradient accumulation graded out of the kernel, by gradient equality.

The worker returns the gradient recorded at each optimizer step; this process compares it with
its own float64 full-window reference and names the usual mistake when one matches. Data are
drawn per grading, so tuning to one set of micro-batches gains nothing.
"""

from __future__ import annotations

import torch

from grader.assignments.lesson4 import accum_checks as ac
from grader.assignments.lesson4.recipe_checks import check_recipe
from grader.kit.assignment import Assignment
from grader.kit.checks import CheckFailed, Context, expect, quiz_check, received_tensor, stub_reason

CALL_SECONDS = 30.0
TOLERANCE = 1e-4  # relative gradient error of float32 accumulation vs the float64 reference
MATCH = 1e-3  # "your gradient is exactly what this mistake gives"

SETUP_SOURCE = """\
import torch
import torch.nn.functional as F

from grader.assignments.lesson4.accum_task import IGNORE"""


HINTS = {
    "micro_mean": "it is the per-micro-batch mean divided by the number of micro-batches: each micro-batch "
    "weighs the same whatever its token count. Sum the token losses (reduction='sum') and "
    "divide by the real tokens of the whole window",
    "micro_mean_accum": "it is the per-micro-batch mean divided by accum_steps: in the short last window that "
    "also shrinks the gradient. Divide each micro-batch's loss sum by the real tokens of its "
    "own window",
    "padding": "it divides by every label position, padding included: count only labels != IGNORE",
    "sum": "it is the plain sum of the token losses: divide by the window's real-token count",
    "stale": "it is this window's gradient plus the previous window's: clear the gradients after each step "
    "(optimizer.zero_grad())",
}


def _describe(window) -> str:
    counts = [int((y != ac.IGNORE).sum()) for _, y in window]
    return f"{len(window)} micro-batch(es) with {counts} real tokens"


def _diagnose(got, params, seed, window, accum_steps, previous, want) -> str:
    for name, grad in ac.wrong_grads(params, seed, window, accum_steps).items():
        if ac.relative_error(got, grad) < MATCH:
            return HINTS[name]
    if previous is not None and ac.relative_error(got, want + previous.double()) < MATCH:
        return HINTS["stale"]
    scale = float(got.double() @ want / (want @ want))
    if ac.relative_error(got, scale * want) < MATCH:
        return (
            f"it points the right way but is {scale:.3g}x the right size: divide each loss sum by the "
            "real tokens of the whole window, once"
        )
    return "check the loss: cross-entropy summed over real tokens (ignore_index=IGNORE), divided by the window's count"


def _draw(ctx: Context, count: int, accum_steps: int, seed: int) -> list:
    """Micro-batches on which the per-micro-batch mean misses every full window by >= MIN_GAP."""
    for _ in range(50):
        batches = ac.make_micro_batches(ctx.rng, count)
        params = ac.flat_params(ac.TokenModel(seed))
        full = [w for w in ac.windows(ac.tensors(batches), accum_steps) if len(w) > 1]
        if all(
            ac.relative_error(
                ac.wrong_grads(params, seed, w, accum_steps)["micro_mean"],
                ac.reference_grad(params, seed, w),
            )
            >= ac.MIN_GAP
            for w in full
        ):
            return batches
    raise CheckFailed("the grader could not draw uneven micro-batches (a grader bug: report it)")


def _refuse_reference(ctx: Context) -> None:
    source = "\n".join(src for _, src in ctx.session.cells)
    expect(
        "GradAccumulator" not in source,
        "your train_accumulated uses effkit's GradAccumulator, the lesson's "
        "reference answer: write the accumulation yourself",
    )


def run_and_compare(ctx: Context, count: int, accum_steps: int) -> str:
    """One call of the learner's function; every recorded step checked. Returns a summary."""
    _refuse_reference(ctx)
    seed = ctx.rng.randrange(1 << 20)
    batches = _draw(ctx, count, accum_steps, seed)
    shown = f"train_accumulated(model, optimizer, {count} micro-batches, accum_steps={accum_steps})"
    r = ctx.session.call(
        "train", CALL_SECONDS, seed=seed, micro_batches=batches, accum_steps=accum_steps
    )
    if not r.ok:
        raise CheckFailed(stub_reason(r.failure) or f"{shown} {r.failure}")
    steps, metas = r.data.get("steps"), r.data.get("grads")
    expect(
        isinstance(steps, int) and isinstance(metas, list) and len(r.blobs) == len(metas) + 2,
        "the worker's answer was malformed",
    )
    init = received_tensor(r.data.get("init"), r.blobs[0], "parameter tensor")
    expect(
        torch.equal(init, ac.flat_params(ac.TokenModel(seed))),
        "the model the grader built was changed "
        "before your function ran (a grader bug, or tampering)",
    )
    wins = ac.windows(ac.tensors(batches), accum_steps)
    sizes = [len(w) for w in wins]
    if steps != len(wins):
        hint = ""
        if steps == count // accum_steps and count % accum_steps:
            hint = (
                f" The short last window ({sizes[-1]} micro-batch(es)) was never stepped: a loop that steps "
                "when (i + 1) % accum_steps == 0 never fires for it. Step after the last micro-batch too."
            )
        elif steps == count:
            hint = (
                " That is one step per micro-batch: step once per window, after its last backward."
            )
        raise CheckFailed(
            f"{shown}: {count} micro-batches in windows of {accum_steps} make {len(wins)} windows "
            f"(sizes {sizes}), so expected {len(wins)} optimizer steps; your function made {steps}.{hint}"
        )
    expect(len(metas) == len(wins), "the worker's answer was malformed")
    params, previous = init.double(), None
    for k, window in enumerate(wins):
        got = received_tensor(metas[k], r.blobs[1 + k], "gradient")
        expect(got.shape == params.shape, f"the gradient of step {k + 1} has the wrong shape")
        want = ac.reference_grad(params, seed, window)
        err = ac.relative_error(got, want)
        if not err <= TOLERANCE:
            why = _diagnose(got, params, seed, window, accum_steps, previous, want)
            raise CheckFailed(
                f"{shown}: the gradient of step {k + 1} of {len(wins)} (window of {_describe(window)}) "
                f"differs from the grader's float64 full-batch gradient by {err:.1%}: {why}."
            )
        params, previous = params - ac.LR * want, got
    after = received_tensor(r.data.get("after"), r.blobs[-1], "parameter tensor")
    expect(after.shape == init.shape, "the worker's answer was malformed")
    moved = ac.relative_error(after - init, params - init.double())
    expect(
        moved <= 1e-3,
        f"{shown}: the gradients were right, but the weights after training are not the "
        f"optimizer's steps with them (off by {moved:.1%}): step only with optimizer.step()",
    )
    events, forwards, backwards = (r.data.get(k) for k in ("events", "forwards", "backwards"))
    expect(
        isinstance(events, str) and isinstance(forwards, int) and isinstance(backwards, int),
        "the worker's answer was malformed",
    )
    # Exactly one forward then its backward, per micro-batch: any other order (a summed backward,
    # padded with zero backwards or not, or a window's forwards all before its backwards) keeps
    # several micro-batches' activations alive at once.
    if not (events == "FB" * count and forwards == backwards == count):
        order = " ".join(events[:24]) + (" ..." if len(events) > 24 else "")
        want = " ".join("FB" * min(count, 4)) + (" ..." if count > 4 else "")
        raise CheckFailed(
            f"{shown}: the gradients were right, but the forwards with gradients on (F, {forwards}) "
            f"and backward passes (B, {backwards}) ran in the order {order or '(none)'}, where "
            f"{want} ({count} pairs, one per micro-batch) is expected. Call backward on each "
            "micro-batch right after its forward: a loss held until later keeps its micro-batch's "
            "activations alive to the end of the window, the memory that accumulation exists to save."
        )
    return (
        f"{count} micro-batches, accum_steps={accum_steps}: {len(wins)} steps (windows {sizes}), "
        f"each micro-batch's backward right after its forward, gradients exact"
    )


def check_full_windows(ctx: Context) -> None:
    for count, accum_steps in ((6, 3), (8, 4)):
        ctx.ok(run_and_compare(ctx, count, accum_steps))


def check_last_window(ctx: Context) -> None:
    for count, accum_steps in ((7, 3), (5, 2)):
        ctx.ok(run_and_compare(ctx, count, accum_steps))


CELL_CHECKS = {
    "test_full_windows": check_full_windows,
    "test_last_window": check_last_window,
    "test_recipe": check_recipe,
    "test_quiz": quiz_check("lesson4", ("q1", "q2", "q3", "q4")),
}
NAMES = ("train_accumulated", "choose_recipe")


ASSIGNMENT = Assignment("lesson4", "train_accumulated", SETUP_SOURCE, CELL_CHECKS, names=NAMES)
