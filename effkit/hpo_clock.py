"""Hyperparameter search on a wall-clock budget, a quasi-random baseline, and what a comparison may claim.

**Why seconds, not epochs.** A budget counted in epochs charges every epoch alike, but an epoch's cost
depends on the configuration (its batch size; a diverged trial that stops training), and the search's own
decisions cost time too (TPE fits its densities before every trial, a pruner reads the study before every
stop). The bill is the wall clock, so the budget is: `run_search` starts a clock, `clock_objective` charges
every epoch of every trial (pruned and cut ones included) and stops the study once the clock passes the
budget; `ClockLedger` is `effkit.hpo.Ledger` whose curve is in seconds since the search started, the
sampler's and pruner's time included (``overhead`` says how much of it that was).

**Why fixed hyperparameters are passed apart.** The Tuning Playbook (Godbole et al. 2023) splits a round's
hyperparameters into scientific, nuisance (searched, so that the scientific ones compare fairly) and fixed
(held, with the caveat that conclusions hold only at those values). ``fixed`` is merged into every
configuration and never searched: the batch size, held so that the search is over the learning rate
and weight decay only (not tuned on validation accuracy), is one.

**Why quasi-random.** `quasi_random` is Optuna's `QMCSampler` on a scrambled Sobol sequence: it spreads the
trials over the space more evenly than random draws and does not adapt, so its trials can be re-analysed
later (an isolation plot, another metric) and its result does not depend on the order trials finish in —
the playbook's recommended sampler for exploration.

**What a comparison may claim.** `paired_difference` compares two methods' outcomes round by round (each
round runs every method once, back to back, so a machine that slows down slows them alike) with effkit's
order-statistic interval (`effkit.abtest.median_ci`) and says "higher" or "lower" only when the whole
interval is on one side of 0 and covers the median often enough.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from dataclasses import dataclass

from effkit.abtest import Verdict, median_ci, median_ci_coverage
from effkit.hpo import Ledger, TuningTask, suggest

# captured at import, as in effkit.abtest: a learner's monkeypatch of time.perf_counter cannot bend it
_clock = time.perf_counter
MIN_COVERAGE = 0.9  # below this an order-statistic interval is too unreliable to name a direction


def searched(space: dict, fixed: dict) -> dict:
    """The part of ``space`` a search samples: every hyperparameter not in ``fixed``."""
    unknown = set(fixed) - set(space)
    if unknown:
        raise ValueError(
            f"fixed hyperparameters {sorted(unknown)} are not in the space {sorted(space)}"
        )
    return {name: dim for name, dim in space.items() if name not in fixed}


@dataclass
class ClockLedger(Ledger):
    """`Ledger` on the search's wall clock: ``seconds`` sums the epochs (training and evaluation),
    ``wall`` is everything since `start`, and the curve's seconds are wall seconds."""

    budget_s: float = math.inf
    started: float | None = None
    wall: float = 0.0

    def start(self) -> None:
        self.started, self.wall = _clock(), 0.0

    def elapsed(self) -> float:
        if self.started is None:
            raise RuntimeError("start() the ledger's clock before the search")
        return _clock() - self.started

    @property
    def spent(self) -> bool:
        return self.elapsed() >= self.budget_s

    @property
    def overhead(self) -> float:
        """Share of the wall clock spent outside the epochs: the sampler, the pruner, Optuna's bookkeeping."""
        return max(0.0, 1.0 - self.seconds / self.wall) if self.wall > 0 else 0.0

    def finish(self, config: dict, score: float) -> None:
        super().finish(config, score)
        epochs, _, best = self.curve[-1]
        self.wall = self.elapsed()
        self.curve[-1] = (
            epochs,
            self.wall,
            best,
        )  # when the search had it, on the search's own clock


def clock_objective(
    task: TuningTask, ledger: ClockLedger, *, space: dict, fixed: dict, seed: int = 0
):
    """``study.optimize``'s objective under ``ledger.budget_s`` wall-clock seconds: trains epoch by epoch,
    charges every epoch, reports, prunes; once the clock passes the budget it cuts the running trial
    (recorded as pruned, its seconds charged, not counted as saved) and stops the study."""
    import optuna

    def objective(trial):
        # TPE decides before the objective runs, an independent sampler inside `suggest`: either way the
        # decision may have used up what was left, and then no trial is trained (nor counted)
        config = suggest(trial, space) | fixed
        if ledger.spent:
            trial.study.stop()
            raise optuna.TrialPruned()
        run = task.trial(config, seed=seed * 100_003 + trial.number)
        ledger.trials += 1
        score = 0.0
        for epoch in range(1, task.max_epochs + 1):
            start = _clock()
            score = run.step()  # the evaluation after the epoch is on the clock too
            ledger.charge(_clock() - start)
            ledger.wall = ledger.elapsed()
            trial.report(score, epoch)
            if epoch < task.max_epochs and ledger.wall >= ledger.budget_s:
                trial.study.stop()
                raise optuna.TrialPruned()
            if epoch < task.max_epochs and trial.should_prune():
                ledger.skipped += task.max_epochs - epoch
                raise optuna.TrialPruned()
        ledger.finish(
            config, score
        )  # a trial completed on the last epoch counts, even past the line
        if ledger.spent:
            trial.study.stop()
        return score

    return objective


def run_search(
    task: TuningTask,
    name: str,
    sampler,
    pruner,
    budget_s: float,
    *,
    space: dict,
    fixed: dict,
    seed: int = 0,
) -> ClockLedger:
    """One search of ``budget_s`` wall-clock seconds; its ledger. The clock starts before the first
    trial is asked for, so the sampler's and pruner's time is on it."""
    import optuna

    study = optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)
    ledger = ClockLedger(name, len(task.x), budget_s=budget_s)
    objective = clock_objective(task, ledger, space=searched(space, fixed), fixed=fixed, seed=seed)
    ledger.start()
    # the objective stops the study at the budget; the timeout only guards against a clock that never
    # advances past it (Optuna checks it between trials)
    study.optimize(objective, timeout=2 * budget_s + 10)
    ledger.wall = ledger.elapsed()
    return ledger


def quasi_random(seed: int):
    """Optuna's quasi-random sampler: a scrambled Sobol sequence (scrambling is what makes ``seed`` matter).
    Its first trial comes from its independent (random) sampler: the sequence needs the space, which
    Optuna learns from that first trial."""
    import optuna

    # "experimental" since Optuna 3.0: the lesson says so once, not a warning per search
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.QMCSampler(
            qmc_type="sobol", scramble=True, seed=seed, warn_independent_sampling=False
        )


@dataclass
class Difference:
    """``other - baseline`` round by round: the median, its order-statistic interval and that
    interval's real coverage, in ``unit`` (values times ``scale``)."""

    median: float
    low: float
    high: float
    coverage: float
    rounds: int
    unit: str
    word: str  # "higher", "lower", "no clear difference" or "too few rounds"
    sentence: str

    @property
    def verdict(self) -> Verdict:
        return Verdict(self.word, self.sentence)

    def __str__(self) -> str:
        return self.sentence


def paired_difference(
    baseline: list[float],
    other: list[float],
    *,
    baseline_label: str = "baseline",
    other_label: str = "other",
    scale: float = 100.0,
    unit: str = "points",
    confidence: float = 0.95,
    min_coverage: float = MIN_COVERAGE,
) -> Difference:
    """Compare ``other`` with ``baseline``, round i with round i, and say only what the interval supports.

    "higher" (or "lower") needs the whole interval of the median difference above (below) 0 and a real
    coverage of at least ``min_coverage`` (5 rounds: 94%; 4 rounds: 88%, too few)."""
    if len(baseline) != len(other) or not baseline:
        raise ValueError(
            f"need as many rounds of each, at least one: {len(baseline)} vs {len(other)}"
        )
    diffs = [scale * (o - b) for b, o in zip(baseline, other, strict=True)]
    low, high = median_ci(diffs, confidence)
    coverage = median_ci_coverage(len(diffs), confidence)
    median = statistics.median(diffs)
    if coverage < min_coverage:
        word = "too few rounds"
        claim = f"too few rounds to compare {other_label} with {baseline_label}"
    elif low > 0:
        word, claim = "higher", f"{other_label} is higher than {baseline_label}"
    elif high < 0:
        word, claim = "lower", f"{other_label} is lower than {baseline_label}"
    else:
        word, claim = (
            "no clear difference",
            f"no clear difference between {other_label} and {baseline_label}",
        )
    sentence = (
        f"{claim}: median difference {median:+.2f} {unit}, interval {low:+.2f} to {high:+.2f} "
        f"(it covers the median {coverage:.0%} of the time; {len(diffs)} rounds)"
    )
    return Difference(median, low, high, coverage, len(diffs), unit, word, sentence)


def isolation(completed: list[tuple[float, dict]], key: str, edges: list[float]) -> list[dict]:
    """The playbook's isolation plot as rows: for each bin [edges[i], edges[i+1]) of the scientific
    hyperparameter ``key``, the best score over everything else (the nuisance hyperparameters
    "optimized away"), its configuration and how many trials fell in the bin (0: no row's best)."""
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        inside = [
            (s, c) for s, c in completed if lo <= c[key] < hi or (hi == edges[-1] and c[key] == hi)
        ]
        best = max(inside, key=lambda sc: sc[0]) if inside else (None, None)
        rows.append(
            {"low": lo, "high": hi, "best": best[0], "config": best[1], "trials": len(inside)}
        )
    return rows
