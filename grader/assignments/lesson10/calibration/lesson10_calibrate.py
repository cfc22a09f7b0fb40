"""Lesson 10's grader calibration: the reference diagnose() against the grader's own planted cases.

``python grader/assignments/lesson10/calibration/lesson10_calibrate.py 1 2 3 4 5`` draws each seed's 8 cases exactly as a grading does
(``checks.draw_cases``: plants, pairs and decoys), profiles them in this process (``checks.profile_case``) and
prints every case's evidence (shares of the step, matmul calls as multiples of the host's call floor, syncs),
how many labels the reference solution and effkit's doctor get right per grading, and each figure's range per
case kind: the gap between a plant and its decoy. PASS_AT must sit below the reference's worst grading.

``python grader/assignments/lesson10/calibration/lesson10_calibrate.py --step [--busy N] 1 2 3`` calibrates part (b) instead: per seed it
grades ``test_fast_step_equal`` and ``test_fast_step_speed`` through the sandbox, as a grading does
(``grader.scoring.checks.grade_cells``), for the reference ``fast_step``, a batched step that keeps the other slow
habits (``.tolist()`` / ``.item()`` per sample, a float64 sum, a Python loop over the parameters) and the
half-fix that keeps the per-sample loop; ``--busy N`` keeps N more processes spinning meanwhile, each in a
session of its own (as other jobs on the machine: in the grader's session they would share its autogroup).
``step_checks.TARGET`` must sit well below the reference's lowest interval and above the half-fix's.
``--only reference`` grades one submission only (``--step --busy 1 --only reference $(seq 1001 1100)``: a
busy-core failure rate).
"""

import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]  # grader/assignments/<lesson>/calibration/
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]  # spinning.py

import spinning  # noqa: E402
from exercise_cells import solution_cells  # noqa: E402
from lesson10_steps import HEAD as _HEAD  # noqa: E402
from lesson10_steps import PER_SAMPLE_LOOP_KEPT  # noqa: E402

from effkit import doctor  # noqa: E402
from effkit.measure import device_name  # noqa: E402
from grader.assignments.lesson10 import checks  # noqa: E402

SOLUTION = ROOT / "solutions" / "lesson10" / "lesson10.ipynb"


def _figures(p: dict) -> dict:
    """The evidence each rule reads, as shares of the step and multiples of the host's call floor."""
    step, r = p["step_ms"], p["ranges_ms"]
    return {
        "data": r["data"] / step,
        "optimizer": r["optimizer"] / step,
        "calls": (p["matmul_us_work"] or 0.0) / p["matmul_us_floor"],
        "padding": p["padding_share"] or 0.0,
        "syncs": p["syncs_per_step"],
        "sync_ms": p["sync_ms"] / step,
    }


def main(seeds: list[int]) -> None:
    ns: dict = {}
    exec(checks.SETUP_SOURCE, ns)  # noqa: S102  (the repository's own reference)
    exec(dict(solution_cells(SOLUTION, SOLUTION))["diagnose"], ns)  # noqa: S102
    print(
        f"device: {device_name('cpu')}; load {os.getloadavg()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    worst = len(checks.LABELS) + 99
    seen: dict[
        str, list[float]
    ] = {}  # "<case kind> <figure>" -> values: the gaps between plant and decoy
    for seed in seeds:
        start = time.perf_counter()
        cases = checks.draw_cases(random.Random(seed))
        right_ref = right_doc = 0
        for label, case_seed, plants, decoys in cases:
            p = checks.profile_case(plants, decoys, case_seed)
            ref, doc = ns["diagnose"](p), doctor.diagnose(p)[0].label
            right_ref += ref == label
            right_doc += doc == label
            f = _figures(p)
            name = checks.case_name(plants, decoys)
            for key, value in f.items():
                seen.setdefault(f"{name} {key}", []).append(value)
            print(
                f"  seed {seed} {name}: reference {ref}, doctor {doc}; step {p['step_ms']:.1f} ms; "
                + ", ".join(f"{k} {v:.3g}" for k, v in f.items())
                + ("" if ref == doc == label else "  <- MISS"),
                flush=True,
            )
        worst = min(worst, right_ref)
        print(
            f"seed {seed}: reference {right_ref}/{len(cases)}, doctor {right_doc}/{len(cases)}, "
            f"{time.perf_counter() - start:.0f} s, load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    print("range of each figure per case kind (the gap between a plant and its decoy):")
    for key in sorted(seen):
        print(f"  {key}: {min(seen[key]):.3g} - {max(seen[key]):.3g} (n={len(seen[key])})")
    print(f"reference's worst grading: {worst}/{checks.CASES}; PASS_AT = {checks.PASS_AT}")


STEP_VARIANTS = {  # fast_step sources besides the reference (which is read from the solution notebook)
    # the batched forward and backward, every other habit of the original kept
    "batched_other_habits_kept": _HEAD
    + """    params = list(model.parameters())
    x = torch.tensor(inputs.tolist())
    y = torch.tensor([int(t.item()) for t in targets])
    losses = F.cross_entropy(model(x), y, reduction="none")
    grads = torch.autograd.grad(losses.mean(), params)
    total = sum(v.item() for v in losses)
    with torch.no_grad():
        for p, g in zip(params, grads):
            p -= lr * (g.double().float() + weight_decay * p)
    return total / len(inputs)
""",
    "per_sample_loop_kept": PER_SAMPLE_LOOP_KEPT,  # tests/lesson10_steps.py, as the exercise tests grade it
}


def main_step(seeds: list[int], busy: int, only: str | None = None) -> None:
    from grader import assignments
    from grader.assignments.lesson10 import step_checks
    from grader.scoring.checks import grade_cells

    a = assignments.get("lesson10")
    variants = {"reference": None, **STEP_VARIANTS}
    if only is not None:  # one submission, many gradings: a busy-core failure rate
        variants = {only: variants[only]}
    print(
        f"device: {device_name('cpu')}; load {os.getloadavg()}; busy processes {busy}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; TARGET {step_checks.TARGET}x"
    )
    hogs = spinning.start(busy)
    try:
        for seed in seeds:
            for name, source in variants.items():
                cells = solution_cells(
                    SOLUTION, SOLUTION, **({"fast_step": source} if source else {})
                )
                start = time.perf_counter()
                verdicts, _ = grade_cells(
                    a, cells, only=["test_fast_step_equal", "test_fast_step_speed"], seed=seed
                )
                said = {g: "pass" if v.passed else "FAIL" for g, v in verdicts.items()}
                speed = verdicts["test_fast_step_speed"]
                line = speed.lines[-1] if speed.passed else speed.reason
                print(
                    f"seed {seed} {name}: {said}, {time.perf_counter() - start:.1f} s\n    {line[:240]}",
                    flush=True,
                )
    finally:
        spinning.stop(hogs)
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--step" in args:
        args.remove("--step")
        busy = 0
        if "--busy" in args:
            at = args.index("--busy")
            busy = int(args[at + 1])
            del args[at : at + 2]
        only = None
        if "--only" in args:
            at = args.index("--only")
            only = args[at + 1]
            del args[at : at + 2]
        main_step([int(a) for a in args] or [1, 2, 3], busy, only)
    else:
        main([int(a) for a in args] or [1, 2, 3])
