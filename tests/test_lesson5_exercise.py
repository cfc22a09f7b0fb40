"""Lesson 5's exercise, graded out of the kernel: gradients vs the grader's own plain stack, the
plan's bytes and time measured only in the grader's process (the plan crosses as JSON).

Each grading starts one sandboxed worker (~3-5 s here); the timed checks add ~3 s. Wrong
submissions replace one solution cell and are graded on the cells that cell can change (the
planner: budget and speed; the forward: gradients); the other cells are the reference's, whose
full marks the first grading shows.
"""

import inspect
import json
import random
from pathlib import Path

import pytest
import torch
from exercise_cells import POINTS as EXERCISE_POINTS  # noqa: E402  (tests/ is on sys.path)
from exercise_cells import grade, grade_in_process, reference_cells, solution_cells  # noqa: E402

from effkit.checkpoint_plan import CheckpointPlan
from grader import assignments
from grader.assignments.lesson5 import ckpt_checks as cc
from grader.assignments.lesson5 import ckpt_reference
from grader.assignments.lesson5.plan_checks import LOOSE
from grader.sandbox.probe import CallResult
from grader.scoring.checks import CellVerdict, Context

LESSON = "lesson5"
ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "lesson5" / "lesson5.ipynb"
POINTS = EXERCISE_POINTS[LESSON]
PLAN_CELLS = ["test_budget", "test_speed", "test_least_recompute"]
A = assignments.get("lesson5")


def _grade(path: Path, only=None, seed: int = 1, **replace: str):
    verdicts, report = grade(
        LESSON, solution_cells(SOLUTION, path, **replace), only=only, seed=seed
    )
    return verdicts, report


def _points(verdicts) -> int:
    return sum(POINTS[g] for g, v in verdicts.items() if v.passed)


# -- fast: structure and the grader's own references --------------------------------------------


def test_the_grader_references_see_the_mistakes_they_name():
    """A recompute without the RNG state really changes the gradients (dropout is on), and the
    loose budget needs some blocks but not all: neither 'nothing' nor 'everything' is the answer."""
    _, plain = ckpt_reference.reference_grads(5, 9)
    _, ckpt = ckpt_reference.reference_grads(5, 9, CheckpointPlan((0, 2)))
    _, no_rng = ckpt_reference.reference_grads(
        5, 9, CheckpointPlan((0, 2)), preserve_rng_state=False
    )
    assert torch.equal(ckpt, plain)
    assert (no_rng - plain).norm() / plain.norm() > 0.05
    from effkit.checkpoint_plan import plan_bytes, plan_for_budget

    stack, (x, _) = cc.build_stack(5), cc.draw_batch(6)
    plain_bytes = plan_bytes(stack, x, CheckpointPlan())
    loose = plan_for_budget(stack, x, int(plain_bytes * LOOSE[0]))
    assert 0 < len(loose.blocks) < cc.N_BLOCKS


def test_a_recompute_without_the_rng_state_is_named():
    """The parent's diagnosis, in process (the sandbox path is the same as use_reentrant's below):
    a forward checkpointed with preserve_rng_state=False gives gradients the check refuses, and
    recomputing that mistake itself, the parent names it."""
    from torch.utils.checkpoint import checkpoint

    from grader.assignments.lesson5.checks import TOLERANCE, _diagnose, _rel

    seed, rng_seed, plan = 11, 12, CheckpointPlan((0, 3, 4))
    stack, (x, w) = cc.build_stack(seed), cc.draw_batch(seed + 1)
    with cc.threads(1):
        torch.manual_seed(rng_seed)
        h = x
        for i, block in enumerate(stack):
            h = (
                checkpoint(block, h, use_reentrant=False, preserve_rng_state=False)
                if i in plan.blocks
                else block(h)
            )
        (h * w).sum().backward()
    got, missing = cc.flat_grads(stack)
    assert not missing and _rel(got, ckpt_reference.reference_grads(seed, rng_seed)[1]) > TOLERANCE
    assert "new dropout masks" in _diagnose({"missing": []}, got, seed, rng_seed, plan)


def test_the_reference_forward_runs_on_a_torch_without_respect_saved_tensors_hooks():
    """torch < 2.12 has no `respect_saved_tensors_hooks` and hands unknown keywords to the block
    (on the H100's torch 2.11: "Block.forward() got an unexpected keyword argument"): the reference
    must detect the argument, not assume it. Its forward runs here against a `checkpoint` with the
    old signature; the gradients are the plain stack's."""
    from torch.utils import checkpoint as ckpt

    from grader.assignments.lesson5.checks import SETUP_SOURCE, TOLERANCE, _rel

    def old_checkpoint(
        function,
        *args,
        use_reentrant=None,
        context_fn=ckpt.noop_context_fn,
        determinism_check="default",
        debug=False,
        **kwargs,
    ):
        # torch < 2.12: preserve_rng_state is popped, every other keyword goes to the function
        preserve = kwargs.pop("preserve_rng_state", True)
        return ckpt.checkpoint(
            lambda *a: function(*a, **kwargs),
            *args,
            use_reentrant=use_reentrant,
            context_fn=context_fn,
            determinism_check=determinism_check,
            debug=debug,
            preserve_rng_state=preserve,
        )

    ns: dict = {}
    exec(SETUP_SOURCE, ns)
    ns["checkpoint"] = old_checkpoint
    exec(dict(reference_cells(LESSON))["checkpointed_forward"], ns)
    seed, rng_seed = 21, 22
    stack, (x, w) = cc.build_stack(seed), cc.draw_batch(seed + 1)
    ops = sorted(cc.ops_in(stack, x) & {"addmm", "mm"})
    with cc.threads(1):
        torch.manual_seed(rng_seed)
        out = ns["checkpointed_forward"](
            stack, x, {"blocks": list(range(cc.N_BLOCKS)), "save": ops}
        )
        (out * w).sum().backward()
    got, missing = cc.flat_grads(stack)
    assert not missing and _rel(got, ckpt_reference.reference_grads(seed, rng_seed)[1]) <= TOLERANCE


class _PlanOnlySession:
    """The parent's view of a worker that answers the planner call with a fixed plan."""

    def __init__(self, plan: dict):
        self.cells, self.plan = [("plan_checkpointing", "")], plan

    def call(self, name, timeout_s, **kwargs):
        assert name == "plan"
        return CallResult(ok=True, data={"plan": self.plan})


def test_plans_are_timed_on_the_device_the_grading_runs_on(monkeypatch):
    """On the H100 lesson 5's speed checks ran on the CPU, one thread: the timing must follow the
    grading's device (a CUDA machine times on its GPU, synchronised, more steps per round)."""
    from grader.assignments.lesson5 import plan_checks

    seen = {}

    def fake_time_plans(
        stack, x, plans, rounds, steps, max_rounds, settled, time_cap_s=None, device="cpu"
    ):
        seen.update(device=device, steps=steps)
        row = {
            "ratio": 1.5,
            "low": 1.2,
            "high": 1.8,
            "rounds": rounds,
            "coverage": 0.99,
            "step_s": 0.01,
        }
        return {name: dict(row) for name in plans}

    monkeypatch.setattr(plan_checks, "grading_device", lambda: "cuda")
    monkeypatch.setattr(cc, "time_plans", fake_time_plans)
    ctx = Context(_PlanOnlySession({"blocks": [0, 1, 2], "save": None}), random.Random(3))
    plan_checks.check_speed(ctx)
    assert seen == {"device": "cuda", "steps": plan_checks.CUDA_STEPS}
    assert any("cuda" in line and "one CPU thread" not in line for line in ctx.lines)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_time_plans_times_on_the_gpu():
    stack, (x, _) = cc.build_stack(5), cc.draw_batch(6)
    t = cc.time_plans(
        stack,
        x,
        {"everything": CheckpointPlan.everything(cc.N_BLOCKS), "none": CheckpointPlan()},
        3,
        2,
        device="cuda",
    )
    assert (
        t["none"]["step_s"] > 0
        and t["none"]["ratio"] > 0
        and next(stack.parameters()).device.type == "cpu"
    )


# -- gradings (each one sandboxed worker) -------------------------------------------------------

EVERYTHING = """def plan_checkpointing(blocks, x, budget_bytes):
    return {"blocks": list(range(len(blocks))), "save": None}"""

# torch >= 2.12 lets saved_activation_bytes count what selective checkpointing keeps; on an
# older torch the grader says it cannot check a selective plan's bytes (tests/oldest_torch.py)
SAC_COUNTED = (
    "respect_saved_tensors_hooks" in inspect.signature(torch.utils.checkpoint.checkpoint).parameters
)

POINTWISE = """def plan_checkpointing(blocks, x, budget_bytes):
    # keep the cheap pointwise outputs, recompute the matmuls: the wrong way round
    return {"blocks": list(range(len(blocks))), "save": ["gelu", "native_layer_norm", "add", "mul"]}"""

REENTRANT = """def checkpointed_forward(blocks, x, plan):
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=True) if i in plan["blocks"] else block(x)
    return x"""

ONE_TOO_MANY = """def plan_checkpointing(blocks, x, budget_bytes):
    for k in range(len(blocks) + 1):
        plan = {"blocks": list(range(k)), "save": None}
        if saved_activation_bytes(lambda: checkpointed_forward(blocks, x, plan).sum()) <= budget_bytes:
            return {"blocks": list(range(min(k + 1, len(blocks)))), "save": None}  # one more, to be safe"""

FORGED = """import effkit.act_checkpoint
def plan_checkpointing(blocks, x, budget_bytes):
    effkit.act_checkpoint.saved_activation_bytes = lambda fn: 0  # "it fits": so checkpoint nothing
    return {"blocks": [], "save": None}"""


# The reference's full marks (every check passing, no flag at all) and the stub's zero (every check
# failing for NotImplementedError) are asserted on the instructor cycle's grading of both, at the
# same seed:
# tests/test_instructor_cycle.py::test_every_check_passes_on_the_reference_and_fails_on_the_stub_for_its_reason.


class PlanOnly:
    """What the parent receives from a worker for the plan cells: the planner's answer as plain
    data. Here the planner runs in the test's process (no sandbox: the sandboxed path is covered by
    the gradings below and the instructor cycle's), which keeps these gradings to the parent's own
    work."""

    def __init__(self, planner_source: str):
        self.ns: dict = {}
        exec(A.setup_source, self.ns)  # noqa: S102 - the exercise's own cells, in a test
        forward = dict(reference_cells(LESSON))["checkpointed_forward"]
        exec(forward + "\n" + planner_source, self.ns)  # noqa: S102
        self.cells, self.load_errors = [("plan_checkpointing", planner_source)], []

    def call(self, probe: str, timeout_s: float, serve=None, **args) -> CallResult:
        assert probe == "plan"
        stack, (x, _) = cc.build_stack(args["seed"]), cc.draw_batch(args["seed"] + 1)
        plan = self.ns["plan_checkpointing"](stack, x, args["budget_bytes"])
        return CallResult(True, {"plan": json.loads(json.dumps(plan))})


def _grade_plan(planner_source: str, seed: int = 1) -> dict[str, CellVerdict]:
    """The plan cells exactly as grade_cells runs them, on PlanOnly's data."""
    return grade_in_process(A, PlanOnly(planner_source), PLAN_CELLS, random.Random(seed))


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, source, points, hint",
    [
        (
            "checkpoint everything",
            EVERYTHING,
            2,
            "checkpoints every block: it fits, but recomputes all of them",
        ),
        ("one block more than needed", ONE_TOO_MANY, 4, "recompute only what the budget needs"),
        (
            "save pointwise, recompute matmuls",
            POINTWISE,
            0,
            "over budget" if SAC_COUNTED else "cannot count what selective checkpointing keeps",
        ),
    ],
)
def test_plausible_planner_mistakes_score_what_they_deserve_with_a_hint(name, source, points, hint):
    """Budget 2 + speed 2 + least recompute 1 on the plan cells (the forward and the quiz are the
    reference's: 5 more)."""
    verdicts = _grade_plan(source)
    failed = [v for v in verdicts.values() if not v.passed]
    assert _points(verdicts) == points, (name, {g: v.reason for g, v in verdicts.items()})
    assert failed and any(hint in v.reason for v in failed), (name, [v.reason for v in failed])


@pytest.mark.slow
def test_use_reentrant_true_loses_the_gradients_and_is_told_why():
    verdicts, _ = _grade(SOLUTION, only=["test_gradients"], checkpointed_forward=REENTRANT)
    reason = verdicts["test_gradients"].reason
    assert not verdicts["test_gradients"].passed and "use_reentrant=False" in reason, reason


@pytest.mark.slow
def test_checkpointing_nothing_on_a_forged_measurement_earns_nothing_and_is_flagged():
    """The planner patches effkit's byte counter in its own process, so "nothing" seems to fit:
    the grader never asks the worker for bytes, measures the plan itself and finds it over
    budget (no speed credit either); the patch is reported."""
    verdicts, report = _grade(SOLUTION, only=PLAN_CELLS, plan_checkpointing=FORGED)
    assert _points(verdicts) == 0, {g: v.reason for g, v in verdicts.items()}
    assert all("over budget" in v.reason for v in verdicts.values()), [
        v.reason for v in verdicts.values()
    ]
    assert any("saved_activation_bytes" in f for f in report["flags"]), report["flags"]


def _inconclusive_timing(stack, x, plans, *args, **kwargs):
    """What time_plans returns on a machine too noisy for its round and time caps: every interval
    straddles 1 (the grader's own plan could not be shown faster)."""
    row = {"ratio": 1.05, "low": 0.9, "high": 1.3, "rounds": 88, "coverage": 0.99, "step_s": 0.05}
    return {name: dict(row, ratio=1.0 if name == "everything" else row["ratio"]) for name in plans}


def test_a_busy_machine_never_costs_the_reference_its_speed_points(monkeypatch):
    """The reference's plan does the grader's plan's work (as many identical blocks): it is timed
    once, not twice and compared with itself (the noise that failed it under load, 1.20x with an
    interval down to 0.94); and when noise hides even the grader's own plan's gain, the speed
    cells judge by structure, so the reference keeps its points and 'everything' still earns none."""
    planner = dict(reference_cells(LESSON))["plan_checkpointing"]
    verdicts = _grade_plan(planner)
    assert all(v.passed for v in verdicts.values()), {g: v.reason for g, v in verdicts.items()}
    assert any("the same work, timed once" in line for line in verdicts["test_speed"].lines)
    monkeypatch.setattr(cc, "time_plans", _inconclusive_timing)
    verdicts = _grade_plan(planner)
    assert all(v.passed for v in verdicts.values()), {g: v.reason for g, v in verdicts.items()}
    assert any("timing inconclusive" in line for line in verdicts["test_speed"].lines)
    verdicts = _grade_plan(EVERYTHING)
    assert not verdicts["test_speed"].passed and not verdicts["test_least_recompute"].passed


KEEPS_AND_RERUNS = """def checkpointed_forward(blocks, x, plan):
    # keeps every block's activations, then re-runs each planned block under no_grad in backward
    # (a hook on its output), so a counter of forward calls sees the recompute checkpointing does
    for i, block in enumerate(blocks):
        inp, x = x, block(x)
        if i in plan["blocks"] and x.requires_grad:
            def rerun(grad, block=block, inp=inp.detach()):
                with torch.no_grad():
                    block(inp)
                return grad
            x.register_hook(rerun)
    return x"""


@pytest.mark.slow
def test_a_forward_that_keeps_its_activations_and_fakes_the_recompute_loses_the_gradient_points():
    """Issue 41, class 8: the 'recomputed' verdict counted forward calls, which this forward
    produces itself (right gradients, right counts, no memory released). The grader judges the
    effect instead: the kernel's peak charge of the worker's cgroup during a step it sizes itself,
    against the activation bytes it measured on its own copy of the stack."""
    verdicts, report = _grade(
        SOLUTION, only=["test_gradients"], checkpointed_forward=KEEPS_AND_RERUNS
    )
    reason = verdicts["test_gradients"].reason
    assert not verdicts["test_gradients"].passed, verdicts["test_gradients"].lines
    assert "activation" in reason and "released" in reason, reason


LOOKS_FOR_A_GPU = """import os
def checkpointed_forward(blocks, x, plan):
    raise RuntimeError(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}")"""


@pytest.mark.slow
def test_the_forward_runs_where_no_gpu_can_hold_its_activations():
    """GPU memory is memory no cgroup counts: activations parked there (a saved_tensors_hooks pack
    to cuda) would look released. The worker is started without a GPU (on a GPU host its device
    nodes are replaced too: test_grader_sandbox's cpu_only test); here, what the forward sees."""
    verdicts, _ = _grade(SOLUTION, only=["test_gradients"], checkpointed_forward=LOOKS_FOR_A_GPU)
    assert "CUDA_VISIBLE_DEVICES=''" in verdicts["test_gradients"].reason, verdicts[
        "test_gradients"
    ].reason


def test_memory_moved_to_swap_still_counts_on_cgroup_v1(tmp_path):
    """madvise(MADV_PAGEOUT) moves a process's own pages to swap where a host has some: on cgroup v1
    the memory figures leave them out (v2 workers get no swap: memory.swap.max 0), so the worker's
    memory is read as memory + swap ("memsw") wherever the kernel accounts it."""
    from grader.sandbox.cgroups import Cgroup

    box = object.__new__(Cgroup)
    box.v2, box.dirs = False, {"memory": tmp_path}
    for name, value in (
        ("usage_in_bytes", 100),
        ("max_usage_in_bytes", 200),
        ("memsw.usage_in_bytes", 150),
        ("memsw.max_usage_in_bytes", 300),
    ):
        (tmp_path / f"memory.{name}").write_text(f"{value}\n")
    assert box.memory_bytes() == (150, 300)
    for name in (
        "memsw.usage_in_bytes",
        "memsw.max_usage_in_bytes",
    ):  # no swap accounting: memory alone
        (tmp_path / f"memory.{name}").unlink()
    assert box.memory_bytes() == (100, 200)


# Issue 52 §5: honest where the memory was measured (every block checkpointed), keeps and fakes the
# recompute for every other plan (the partial and the selective plans of test_gradients): 10/10
# before, deserved 7.
HONEST_WHERE_MEASURED = (
    dict(reference_cells(LESSON))["checkpointed_forward"].replace(
        "def checkpointed_forward(", "def _honest_forward("
    )
    + "\n\n"
    + KEEPS_AND_RERUNS.replace(
        "    for i, block in enumerate(blocks):",
        "    if sorted(plan['blocks']) == list(range(len(blocks))) and plan.get('save') is None:\n"
        "        return _honest_forward(blocks, x, plan)  # the plan whose memory is measured\n"
        "    for i, block in enumerate(blocks):",
        1,
    )
)


@pytest.mark.slow
def test_a_forward_honest_only_on_the_every_block_plan_loses_the_gradient_points():
    verdicts, _ = _grade(
        SOLUTION, only=["test_gradients"], checkpointed_forward=HONEST_WHERE_MEASURED
    )
    reason = verdicts["test_gradients"].reason
    assert not verdicts["test_gradients"].passed, verdicts["test_gradients"].lines
    assert "activations were not released" in reason, reason
    assert "every block of 6 checkpointed, recomputed whole" not in reason, reason  # another plan
