"""Calibrate lesson 12's search checks: the reference policy and plausible mistakes over several secret tasks.

Usage: ``python grader/assignments/lesson12/calibration/lesson12_calibrate.py SEED [SEED ...] [--only NAME ...] [--budget EPOCHS]``

Each seed is one grading's draws (``random.Random(seed)``: task, trial seeds, final seeds), graded in this
process on the policy's cell source (the probe functions the worker would run, then the parent's
checks): per policy, the gap of its chosen configuration below the grid's best (pp, held out, mean of 3
fresh seeds), the share of budget saved by pruning, and both verdicts at the committed MARGIN and
MIN_SAVED. One thread per run (deterministic per seed); the seconds printed are this machine's.
``--budget`` grades under another ``BUDGET`` than the committed one: how BUDGET itself was chosen.
``--searches-only`` replays only the pair's two searches of each grading (the same draws, no grid, no
retrains) and prints per task the share saved and the share of the saved epochs that came from stops of
trailing trials (search_checks.TRAILED, MIN_EVIDENCE), ``--repeats`` times (a policy drawing from os.urandom
differs each time). ``--window`` instead takes task seeds and prints, per loss scale c, where the lesson's best
configuration (lr 0.355, wd 5.6e-4) lands against a small LR sweep's best (held out, 2 seeds), using
the exact equivalence: SGD on c * loss at (lr, wd) steps as on the loss at (lr * c, wd / c).
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]  # grader/assignments/<lesson>/calibration/
sys.path.insert(0, str(ROOT))

from grader import assignments  # noqa: E402
from grader.assignments.lesson12 import hpo_task, probes, search_checks  # noqa: E402
from grader.cli.tools import reference_cells  # noqa: E402
from grader.sandbox.probe import CallResult  # noqa: E402
from grader.scoring.checks import CheckFailed, Context  # noqa: E402

# the policies come from the test that grades them (tests/ also holds exercise_cells, which it imports)
sys.path.insert(0, str(ROOT / "tests"))
from test_lesson12_exercise import POLICIES  # noqa: E402

A = assignments.get("lesson12")

# the policies calibrated, as tests/test_lesson12_exercise.py grades them (its POLICIES: name ->
# (search cell source, expected verdicts)): the reference, two of the mistakes and the shortcuts of
# issue 50 (the lesson's best configuration copied; a ladder fixed in advance with blind stops, its filler
# fixed, drawn from os.urandom, or varied by the last score) and an honest seeded random search with
# successive halving by hand
CALIBRATED = (
    "reference",
    "no_pruning",
    "weight_decay_grid",
    "copies_the_lessons_best",
    "fixed_ladder_stops_blind",
    "blind_ladder_urandom",
    "blind_ladder_last_score",
    "random_search_halving",
    "dense_ladder_low_lr_filler",
    "dense_ladder_counts_its_searches",
)
_SHA = "optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)"
# calibration only (no test grades them): the other Optuna pruners behind the reference's TPE, and the residual
# of the replay, the dense ladder whose fillers are stopped by reading their score (below the best of the epoch
# so far): known to trail, stopped because they did
EXTRA = {
    "tpe_median": POLICIES["reference"][0].replace(
        _SHA, "optuna.pruners.MedianPruner(n_startup_trials=5)"
    ),
    "tpe_hyperband": POLICIES["reference"][0].replace(
        _SHA, "optuna.pruners.HyperbandPruner(1, 9, 3)"
    ),
    "dense_ladder_reads_filler": POLICIES["dense_ladder_low_lr_filler"][0]
    .replace("s.r = random.SystemRandom()", "s.r, s.top = random.SystemRandom(), {}")
    .replace(
        "return t >= 11",
        "s.top[e] = max(s.top.get(e, sc), sc)\n        return t >= 11 and sc < s.top[e]",
    ),
}
assert all(source != POLICIES["reference"][0] for source in EXTRA.values())


class InProcess:
    """What a worker would answer, computed here from the cells (repository code, not a learner's)."""

    def __init__(self, cells: list[tuple[str, str]]):
        self.cells = cells
        self.close()

    def close(self) -> None:
        """The sandbox's new worker for each search and replay (search_checks._fresh_worker): the cells run
        again in a fresh namespace."""
        self.ns: dict = {}
        self.load_errors: list = []
        exec(A.setup_source, self.ns)  # noqa: S102
        for _, source in self.cells:
            exec(source, self.ns)  # noqa: S102

    def call(self, probe: str, timeout_s: float, serve=None, **args) -> CallResult:
        try:
            data, blobs = getattr(probes, f"probe_{probe}")(self, **args)
        except Exception as err:  # noqa: BLE001
            return CallResult(False, failure=f"raised {type(err).__name__}: {err}")
        return CallResult(True, data, blobs)


def grade(cells, seed: int) -> dict:
    session = InProcess(cells)
    out = {}
    for gid in ("test_search", "test_pruning"):
        ctx = Context(session, random.Random(seed))
        try:
            A.cell_checks[gid](ctx)
            out[gid] = (True, ctx.lines)
        except CheckFailed as err:
            out[gid] = (False, str(err))
    return out, session.lesson12_outcome


def searches_only(cells, seed: int) -> list:
    """The pair's two searches exactly as ``search_checks.evaluate`` runs them for grading ``seed`` (its
    draws in the same order: the final seeds drawn after each search), without the grid or the retrains."""
    ctx = Context(InProcess(cells), random.Random(seed))
    first, policy_seed = ctx.rng.randrange(1 << 20), ctx.rng.randrange(1 << 30)
    runs = []
    for task_seed in hpo_task.pair(first):
        runs.append(search_checks.run_search(ctx, task_seed, policy_seed))
        [ctx.rng.randrange(1 << 30) for _ in range(search_checks.FINAL_SEEDS)]
    return runs


def _evidence(run) -> str:
    trailed, saved = run.evidence()
    return f"evidence {trailed / saved if saved else 0.0:5.1%} of {saved:3d} saved epochs"


def _replayed(cells, runs, seed: int) -> str:
    """check_pruning's replays of each task's probed stops (search_checks.PROBES, drawn as a grading of
    ``seed`` draws them): how many ran on when replayed as the best of their epoch."""
    ctx = Context(InProcess(cells), random.Random(seed))
    out = []
    for run in runs:
        probes = search_checks.probed_stops(run, ctx.rng)
        blind = [n for n in probes if search_checks.replay_stops_again(ctx, run, n)]
        out.append(f"{len(probes) - len(blind)}/{len(probes)}")
    return "replayed stops that ran on " + " ".join(out)


def _held_out(task, lr: float, wd: float) -> float:
    """Held-out accuracy after MAX_EPOCHS at scale 1, mean of 2 trial seeds."""
    runs = []
    for seed in (1, 2):
        trial = task.trial({"lr": lr, "weight_decay": wd, **hpo_task.FIXED}, seed)
        for _ in range(hpo_task.MAX_EPOCHS):
            trial.step()
        runs.append(trial.test_accuracy())
    return sum(runs) / len(runs)


# lr * wd is what the loss scale keeps ((lr * c) * (wd / c)): each product is one family of fixed
# configurations sliding along the scale; the lesson's best has 0.355 * 5.6e-4 = 2e-4
PRODUCTS = (0.355 * 5.6e-4, 1e-7, 2e-5, 2e-3)


def window(task_seeds: list[int], products: tuple[float, ...]) -> None:
    """Per task and lr * wd product, where a fixed configuration lands as the scale moves it, and the widest
    run of scales (sqrt 2 apart) it stays within MARGIN of a small LR sweep's best: the pair's ratio
    (hpo_task.PAIR_RATIO) must exceed it, or one fixed configuration passes both tasks of a grading."""
    from effkit import hpo

    for task_seed in task_seeds:
        task = hpo.TuningTask(task_seed, max_epochs=hpo_task.MAX_EPOCHS)
        held_out = functools.partial(_held_out, task)
        best = max(held_out(lr, 1e-4) for lr in (0.1, 0.18, 0.32, 0.56))
        for product in products:
            scales = [2 ** (k / 2) for k in range(-8, 13)]
            rows = [(c, held_out(0.355 * c, product / (0.355 * c))) for c in scales]
            within = [best - a <= search_checks.MARGIN for _, a in rows]
            runs, run = [], []
            for (c, _), ok in zip(rows, within, strict=True):
                run = run + [c] if ok else []
                runs.append(run)
            widest = max(runs, key=len)
            width = widest[-1] / widest[0] if widest else 0.0
            print(
                f"task {task_seed} lr*wd {product:.1e}: best of a small LR sweep {best:.3f}; within "
                f"{search_checks.MARGIN:.0%} over a {width:.1f}x run of scales (the next scale out fails: < "
                f"{2 * width:.1f}x); lr 0.355 c at scale 1: "
                + " ".join(f"c{c:.2f}:{100 * (a - best):+.1f}pp" for c, a in rows),
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seeds", type=int, nargs="+")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument(
        "--budget", type=int, default=None, help="grade under this BUDGET (epochs) instead"
    )
    ap.add_argument("--window", action="store_true", help="the lesson's best config per loss scale")
    ap.add_argument(
        "--searches-only", action="store_true", help="the two searches only: pruning's figures"
    )
    ap.add_argument(
        "--repeats", type=int, default=1, help="with --searches-only: runs per policy and seed"
    )
    args = ap.parse_args()
    if args.window:
        window(args.seeds, PRODUCTS)
        return
    if args.budget is not None:
        search_checks.BUDGET = args.budget
    grid_cost = len(hpo_task.grid_configs()) * hpo_task.MAX_EPOCHS
    print(
        f"BUDGET {search_checks.BUDGET} epochs at {hpo_task.FIXED} (grid: {len(hpo_task.grid_configs())} "
        f"configurations, {grid_cost} epochs, {grid_cost / search_checks.BUDGET:.1f}x the budget); MARGIN "
        f"{search_checks.MARGIN:.0%}, MIN_SAVED {search_checks.MIN_SAVED:.0%}, MIN_EVIDENCE "
        f"{search_checks.MIN_EVIDENCE:.0%} (stops outside each epoch's top {search_checks.TRAILED:.0%}); load average "
        f"{', '.join(f'{v:.2f}' for v in os.getloadavg())}",
        flush=True,
    )
    ref = dict(reference_cells(A))
    policies = {name: POLICIES[name][0] for name in CALIBRATED}
    policies |= {name: source for name, source in EXTRA.items() if args.only and name in args.only}
    if args.searches_only:
        for seed in args.seeds:
            for name, source in policies.items():
                if args.only and name not in args.only:
                    continue
                cells = [(g, source if g == "search" else s) for g, s in ref.items()]
                for rep in range(args.repeats):
                    start = time.perf_counter()
                    runs = searches_only(cells, seed)
                    tasks = (
                        " | ".join(
                            f"task {k + 1} scale {hpo_task.loss_scale(run.task_seed):6.2f} saved {run.saved:5.1%} "
                            f"{_evidence(run)}"
                            for k, run in enumerate(runs)
                        )
                        + " | "
                        + _replayed(cells, runs, seed)
                    )
                    print(
                        f"seed {seed} {name:24s} run {rep} {tasks} | {time.perf_counter() - start:.1f} s",
                        flush=True,
                    )
        return
    for seed in args.seeds:
        grid_shown = False
        for name, source in policies.items():
            if args.only and name not in args.only:
                continue
            cells = [(g, source if g == "search" else s) for g, s in ref.items()]
            start = time.perf_counter()
            verdicts, outcome = grade(cells, seed)
            print(
                f"seed {seed} {name:18s} search {verdicts['test_search'][0]!s:5s} pruning "
                f"{verdicts['test_pruning'][0]!s:5s} | {time.perf_counter() - start:.1f} s",
                flush=True,
            )
            for k, run in enumerate(outcome.runs):  # the pair's two tasks (hpo_task.pair)
                label = f"task {k + 1} of 2"
                gap = next(
                    (x for x in outcome.lines if x.startswith(label) and "below the grid" in x), ""
                )
                print(
                    f"    task {k + 1} scale {hpo_task.loss_scale(run.task_seed):6.2f} saved {run.saved:5.1%} "
                    f"{_evidence(run)} trials {len(run.trials):3d} | "
                    f"{gap.split(': ')[-1] if gap else 'no choice'}",
                    flush=True,
                )
            # the grid's best, once a seed: at an edge of the space, the grid would be too narrow
            grids = [x for x in outcome.lines if "the grader's grid" in x]
            if grids and not grid_shown:
                for grid in grids:
                    print(f"seed {seed} {grid}", flush=True)
                grid_shown = True


if __name__ == "__main__":
    main()
