"""Lesson 9 - knowledge distillation, graded out of the kernel: the loss on the grader's logits, a recipe trained here.

The worker's loss values and gradients are compared with ``effkit.distill.kd_loss`` here, and a
miss names the matching mistake. Temperatures are drawn from 2 to 5: at T = 1 a missing T^2 would not show.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from effkit.distill import kd_loss
from grader.assignments.lesson9.recipe_checks import check_recipe
from grader.kit.assignment import Assignment
from grader.kit.checks import CheckFailed, Context, expect, quiz_check, received_tensor, stub_reason

TOLERANCE = 1e-6  # float64 both sides: the same arithmetic, summed in another order
MATCH = 1e-6
CALL_SECONDS = 30
SETUP_SOURCE = """\
import torch
import torch.nn.functional as F"""


HINTS = {
    "no_t2": "it is the loss without the T^2 factor on the soft term. Soft-target gradients shrink as 1/T^2; "
    "multiply the KL by temperature ** 2 so the soft term keeps its weight when T changes",
    "reversed": "it is KL(student || teacher): the arguments are reversed. F.kl_div(input, target) computes "
    "KL(target || input) and wants the *student's* log-probabilities as input and the teacher's "
    "distribution as target",
    "softmax_input": "it passes probabilities (softmax) where F.kl_div expects log-probabilities: use "
    "F.log_softmax(student_logits / T, dim=-1) as its input",
    "softmax_both_log_target": "it passes the student's softmax (not log_softmax) as F.kl_div's input: the "
    "input must be log-probabilities",
    "mean_reduction": "it averages the KL over classes too (reduction='mean'): use reduction='batchmean', the "
    "KL per sample averaged over the batch",
    "alpha_swapped": "alpha weighs the wrong term: alpha multiplies the soft (KL) term, 1 - alpha the "
    "cross-entropy with the labels",
    "soft_ce": "the hard term uses the softened logits (student / T): the cross-entropy with the labels uses "
    "the student's plain logits",
}


def mistakes(
    s: torch.Tensor, t: torch.Tensor, y: torch.Tensor, temp: float, alpha: float
) -> dict[str, torch.Tensor]:
    """What the usual mistakes give on these numbers, by name (the names are the hints' keys)."""
    log_s, log_t = F.log_softmax(s / temp, -1), F.log_softmax(t / temp, -1)
    kl = F.kl_div(log_s, log_t, reduction="batchmean", log_target=True)
    ce = F.cross_entropy(s, y)
    soft = temp**2
    return {
        "no_t2": alpha * kl + (1 - alpha) * ce,
        "reversed": alpha * soft * F.kl_div(log_t, log_s, reduction="batchmean", log_target=True)
        + (1 - alpha) * ce,
        "softmax_input": alpha * soft * F.kl_div(log_s.exp(), log_t.exp(), reduction="batchmean")
        + (1 - alpha) * ce,
        "softmax_both_log_target": alpha
        * soft
        * F.kl_div(log_s.exp(), log_t, reduction="batchmean", log_target=True)
        + (1 - alpha) * ce,
        "mean_reduction": alpha * soft * F.kl_div(log_s, log_t, reduction="mean", log_target=True)
        + (1 - alpha) * ce,
        "alpha_swapped": (1 - alpha) * soft * kl + alpha * ce,
        "soft_ce": alpha * soft * kl + (1 - alpha) * F.cross_entropy(s / temp, y),
    }


def draw_cases(ctx: Context, count: int = 4) -> list[dict]:
    """Logits, labels, temperature and alpha per case; alpha 1 once (the soft term alone)."""
    cases = []
    for i in range(count):
        n, c = ctx.rng.randint(4, 9), ctx.rng.randint(3, 10)
        scale = ctx.rng.choice((1.0, 3.0, 6.0))
        cases.append(
            {
                "student": [[ctx.rng.gauss(0, scale) for _ in range(c)] for _ in range(n)],
                "teacher": [[ctx.rng.gauss(0, scale) for _ in range(c)] for _ in range(n)],
                "labels": [ctx.rng.randrange(c) for _ in range(n)],
                "temperature": float(ctx.rng.choice((2.0, 3.0, 4.0, 5.0))),
                "alpha": 1.0 if i == 0 else float(ctx.rng.choice((0.3, 0.5, 0.7, 0.9))),
            }
        )
    return cases


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def _results(ctx: Context, cases: list[dict]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    r = ctx.session.call("loss", CALL_SECONDS, cases=cases)
    if not r.ok:
        raise CheckFailed(stub_reason(r.failure) or f"distillation_loss(...) {r.failure}")
    metas = r.data.get("tensors")
    expect(
        isinstance(metas, list) and len(metas) == 2 * len(cases) == len(r.blobs),
        "the worker's answer was malformed",
    )
    tensors = [received_tensor(m, raw) for m, raw in zip(metas, r.blobs, strict=True)]
    return list(zip(tensors[::2], tensors[1::2], strict=True))


def _reference(case: dict) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    s = torch.tensor(case["student"], dtype=torch.float64, requires_grad=True)
    t = torch.tensor(case["teacher"], dtype=torch.float64)
    y = torch.tensor(case["labels"])
    value = kd_loss(s, t, y, case["temperature"], case["alpha"])
    (grad,) = torch.autograd.grad(value, s)
    wrong = {}
    with (
        warnings.catch_warnings()
    ):  # reduction="mean" warns that it is not the KL: that is the mistake
        warnings.simplefilter("ignore", UserWarning)
        wrong_values = mistakes(s, t, y, case["temperature"], case["alpha"])
    for name, v in wrong_values.items():
        wrong[name] = torch.autograd.grad(v, s, retain_graph=True)[0]
        wrong[name + ":value"] = v.detach().reshape(1)
    return value.detach().reshape(1), grad, wrong


def _diagnose(got: torch.Tensor, wrong: dict[str, torch.Tensor], what: str) -> str:
    for name in HINTS:
        key = name + ":value" if what == "value" else name
        if _rel(got, wrong[key]) < MATCH:
            return HINTS[name]
    return (
        "check each piece: log_softmax of both logits divided by T, F.kl_div(student_log_probs, teacher_probs, "
        "reduction='batchmean') times T^2 and alpha, plus (1 - alpha) times F.cross_entropy(student_logits, labels)"
    )


def _shown(case: dict) -> str:
    n, c = len(case["student"]), len(case["student"][0])
    return f"logits {n} x {c}, T={case['temperature']:g}, alpha={case['alpha']:g}"


def _check(ctx: Context, what: str) -> None:
    cases = draw_cases(ctx)
    for case, (value, grad) in zip(cases, _results(ctx, cases), strict=True):
        want_value, want_grad, wrong = _reference(case)
        got, want = (value, want_value) if what == "value" else (grad, want_grad)
        err = _rel(got, want)
        if not err <= TOLERANCE:
            shown = (
                f"{got.item():.6g} vs the grader's {want.item():.6g}"
                if what == "value"
                else f"off by {err:.1%}"
            )
            raise CheckFailed(
                f"distillation_loss on the grader's {_shown(case)}: the {what} is {shown}: "
                f"{_diagnose(got, wrong, what)}."
            )
        ctx.ok(f"{_shown(case)}: {what} equal to the grader's reference (relative error {err:.0e})")


def check_value(ctx: Context) -> None:
    _check(ctx, "value")


def check_gradient(ctx: Context) -> None:
    _check(ctx, "gradient")


CELL_CHECKS = {
    "test_loss_value": check_value,
    "test_loss_gradient": check_gradient,
    "test_recipe": check_recipe,
    "test_quiz": quiz_check("lesson9", ("q1", "q2", "q3", "q4")),
}
NAMES = ("distillation_loss", "distillation_recipe")


ASSIGNMENT = Assignment("lesson9", "distillation_loss", SETUP_SOURCE, CELL_CHECKS, names=NAMES)
