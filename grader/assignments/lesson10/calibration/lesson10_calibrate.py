"""Lesson 10's grader calibration: the reference diagnose() against the grader's own planted cases.

``python grader/assignments/lesson10/calibration/lesson10_calibrate.py 1 2 3 4 5`` draws each seed's 8 cases exactly as a grading does
(``checks.draw_cases``: plants, pairs and decoys), profiles them in this process (``checks.profile_case``) and
prints every case's evidence (shares of the step, matmul calls as multiples of the host's call floor, syncs),
how many labels the reference solution and effkit's doctor get right per grading, and each figure's range per
case kind: the gap between a plant and its decoy. A grading needs every case named (a missed case is profiled
again once, at most ``checks.SECOND_LOOKS``): the reference must name every case of every grading.

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


EVIDENCE = {  # the figure that tells each plant from its decoy
    "optimizer": "optimizer",  # the optimizer range's share of the step
    "overhead": "calls",  # the work's matmul calls as multiples of the host's empty call
    "padding": "padding",
    "sync": "syncs",
}


def _evidence(f: dict, plants: tuple, decoys: tuple):
    """("<figure>: <plant> plant|decoy", value) pairs, and for a pair the first plant's evidence against the
    second's: a share over the syncs' time inside their reads, or the overhead plant's calls."""
    for kind, figure in EVIDENCE.items():
        if kind in plants or kind in decoys:
            yield f"{figure}: {kind} {'plant' if kind in plants else 'decoy'}", f[figure]
    if len(plants) == 2:
        key = f"pair {plants[0]}+{plants[1]}"
        if plants[0] == "overhead":
            yield f"{key}: calls", f["calls"]
        else:
            share = f["padding"] if plants[0] == "padding" else f[plants[0]]
            yield f"{key}: {plants[0]} share / sync share", share / max(f["sync_ms"], 1e-9)


def _unprofiled_ms(cases: dict[str, tuple], rounds: int = 7, steps: int = 5) -> dict[str, float]:
    """Median unprofiled step time (ms) of each (plants, decoys) step, one thread, the steps interleaved
    round by round so that a busy spell slows them alike: what a fix saves is the difference."""
    import statistics

    import torch

    from effkit.doctor_plants import planted_step

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        built = {k: planted_step(plants, 0, decoys) for k, (plants, decoys) in cases.items()}
        times: dict[str, list[float]] = {k: [] for k in cases}
        for step in built.values():
            for _ in range(3):
                step.run()
        for _ in range(rounds):
            for k, step in built.items():
                t0 = time.perf_counter()
                for _ in range(steps):
                    step.run()
                times[k].append((time.perf_counter() - t0) * 1e3 / steps)
    finally:
        torch.set_num_threads(threads)
    return {k: statistics.median(v) for k, v in times.items()}


def main_costs(rounds: int) -> None:
    """What each plant costs, unprofiled: its step against the clean one (a share of the planted step), and
    for each pair of ``checks.PAIRED`` with the partner, what removing either plant saves."""
    print(
        f"device: {device_name('cpu')}; load {os.getloadavg()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    for r in range(rounds):
        # padding is left out: its cost is the padded positions' compute, which removing the plant keeps
        singles = {p: ((p,), ()) for p in ("data", "sync", "overhead", "optimizer")}
        t = _unprofiled_ms({"clean": ((), ()), **singles})
        line = ", ".join(f"{p} {1 - t['clean'] / t[p]:+.0%}" for p in singles if p != "overhead")
        line += f"; batch 1 costs {1 - t['clean'] / 32 / t['overhead']:.0%} of each sample's time"
        print(
            f"round {r}: clean {t['clean']:.1f} ms; each plant's cost, share of its step: {line}",
            flush=True,
        )
        for first in checks.PAIRED:
            pair = (first, checks.PARTNER)
            t = _unprofiled_ms(
                {"pair": (pair, ()), "first": ((first,), ()), "partner": ((checks.PARTNER,), ())}
            )
            if first == "overhead":  # batch 1 without the partner, against batch 1 with it
                print(
                    f"  pair {'+'.join(pair)}: the partner costs {1 - t['first'] / t['pair']:.0%} of the step",
                    flush=True,
                )
                continue
            cost_first, cost_partner = t["pair"] - t["partner"], t["pair"] - t["first"]
            print(
                f"  pair {'+'.join(pair)} {t['pair']:.1f} ms: removing {first} saves {cost_first / t['pair']:.0%}, "
                f"removing {checks.PARTNER} {cost_partner / t['pair']:.0%}",
                flush=True,
            )


def main(seeds: list[int]) -> None:
    ns: dict = {}
    exec(checks.SETUP_SOURCE, ns)  # noqa: S102  (the repository's own reference)
    exec(dict(solution_cells(SOLUTION, SOLUTION))["diagnose"], ns)  # noqa: S102
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"device: {device_name('cpu')}; load {os.getloadavg()}; {now}")
    worst = len(checks.LABELS) + 99
    seen: dict[str, list[float]] = {}  # "<figure>: <plant or decoy>" -> its values over the cases
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
            for key, value in _evidence(f, plants, decoys):
                seen.setdefault(key, []).append(value)
            print(
                f"  seed {seed} {checks.case_name(plants, decoys)}: reference {ref}, doctor {doc}; "
                f"step {p['step_ms']:.1f} ms; "
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
    print("each plant's evidence against its decoy's (min - max over the cases):")
    for key in sorted(seen):
        print(f"  {key}: {min(seen[key]):.3g} - {max(seen[key]):.3g} (n={len(seen[key])})")
    print(
        f"reference's worst grading: {worst}/{checks.CASES} on the first profiles; every case needed, "
        f"a miss looked at again once (at most {checks.SECOND_LOOKS} per grading)"
    )


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
    # --costs 3: three rounds of each pair's unprofiled cost
    if "--costs" in args:
        args.remove("--costs")
        main_costs(int(args[0]) if args else 3)
        raise SystemExit(0)
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
