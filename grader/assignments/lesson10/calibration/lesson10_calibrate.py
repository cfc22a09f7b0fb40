"""Lesson 10's grader calibration: the reference diagnose() against the grader's own planted cases.

``python grader/assignments/lesson10/calibration/lesson10_calibrate.py 1 2 3 4 5`` draws each seed's 8 cases exactly as a grading does
(``checks.draw_cases``), profiles them in this process (``checks.profile_case``) and prints, per grading,
how many labels the reference solution and effkit's doctor get right, and every miss with its profile's
key figures. PASS_AT must sit below the reference's worst grading.

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


def main(seeds: list[int]) -> None:
    ns: dict = {}
    exec(checks.SETUP_SOURCE, ns)  # noqa: S102  (the repository's own reference)
    exec(dict(solution_cells(SOLUTION, SOLUTION))["diagnose"], ns)  # noqa: S102
    worst = len(checks.LABELS) + 99
    for seed in seeds:
        cases = checks.draw_cases(random.Random(seed))
        right_ref = right_doc = 0
        for label, case_seed in cases:
            p = checks.profile_case(label, case_seed)
            ref, doc = ns["diagnose"](p), doctor.diagnose(p)[0].label
            right_ref += ref == label
            right_doc += doc == label
            if ref != label or doc != label:
                r = p["ranges_ms"]
                print(
                    f"  seed {seed}: planted {label}, reference {ref}, doctor {doc}; step {p['step_ms']:.1f} ms, "
                    f"data {r['data'] / p['step_ms']:.0%}, optimizer {r['optimizer'] / p['step_ms']:.0%}, "
                    f"matmul median {p['matmul_us_median']:.0f} us, syncs {p['syncs_per_step']:.0f}"
                )
        worst = min(worst, right_ref)
        print(
            f"seed {seed}: reference {right_ref}/{len(cases)}, doctor {right_doc}/{len(cases)}",
            flush=True,
        )
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
