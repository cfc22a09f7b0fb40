"""effkit.hpo_clock: a search's wall clock is its budget, quasi-random spreads its trials, and a comparison
claims only what its interval supports. The budget tests run on a fake clock that advances one second per
epoch (and what the sampler is told to spend), so they are exact on a busy machine."""

import math

import optuna
import pytest

from effkit import hpo, hpo_clock

TINY = dict(n_train=128, n_val=128, n_test=128, max_epochs=3)
FIXED = {"batch_size": 64}


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(hpo_clock, "_clock", fake)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return fake


class SecondPerEpochTask(hpo.TuningTask):
    """Every epoch takes exactly one second of the fake clock."""

    def __init__(self, clock, **sizes):
        super().__init__(seed=1, **sizes)
        self.clock = clock

    def trial(self, config, seed):
        run = super().trial(config, seed)
        step = run.step

        def timed_step():
            self.clock.now += 1.0
            return step()

        run.step = timed_step
        return run


class SlowSampler(optuna.samplers.RandomSampler):
    """A sampler whose every decision costs ``cost`` seconds of the fake clock (a stand-in for TPE's)."""

    def __init__(self, clock, cost, seed=0):
        super().__init__(seed=seed)
        self.clock, self.cost = clock, cost

    def sample_independent(self, study, trial, name, distribution):
        self.clock.now += self.cost
        return super().sample_independent(study, trial, name, distribution)


class Always(optuna.pruners.BasePruner):
    def prune(self, study, trial):
        return True


def _search(task, sampler, pruner, budget_s):
    return hpo_clock.run_search(
        task, "s", sampler, pruner, budget_s, space=hpo.SPACE, fixed=FIXED, seed=0
    )


def test_the_fixed_hyperparameters_are_held_not_searched():
    assert set(hpo_clock.searched(hpo.SPACE, FIXED)) == {"lr", "weight_decay"}
    with pytest.raises(ValueError, match="momentum"):
        hpo_clock.searched(hpo.SPACE, {"momentum": 0.9})


def test_pruned_and_cut_trials_are_charged_and_only_pruner_stops_are_saved(clock):
    task = SecondPerEpochTask(clock, **TINY)
    ledger = _search(task, optuna.samplers.RandomSampler(seed=0), Always(), budget_s=5)
    # five trials of one second each; the fifth crossed the line and was cut, not saved
    assert ledger.trials == 5 and ledger.epochs == 5 and ledger.complete == 0
    assert ledger.seconds == 5 and ledger.wall == 5
    assert ledger.skipped == 4 * (task.max_epochs - 1)
    ledger = _search(task, optuna.samplers.RandomSampler(seed=0), optuna.pruners.NopPruner(), 7)
    assert (
        ledger.complete == 2 and ledger.epochs == 7 and ledger.skipped == 0
    )  # the third cut at 7 s
    assert [s for _, s, _ in ledger.curve] == [3, 6]  # each complete trial when the search had it
    assert all(config["batch_size"] == 64 for _, config in ledger.completed)


def test_the_samplers_own_time_is_on_the_bill(clock):
    task = SecondPerEpochTask(clock, **TINY)
    # two hyperparameters sampled per trial at 0.5 s each: 1 s of decisions + 3 s of epochs a trial
    ledger = _search(task, SlowSampler(clock, 0.5), optuna.pruners.NopPruner(), budget_s=10)
    assert ledger.complete == 2 and ledger.seconds == 7 and ledger.wall == 10
    assert ledger.overhead == pytest.approx(0.3)
    assert ledger.cost_to(0.0) == (
        3,
        4.0,
    )  # the first complete trial at 4 s of wall clock, 3 epochs
    # decisions that use up the budget before a trial trains end the search without charging a trial
    ledger = _search(task, SlowSampler(clock, 0.5), optuna.pruners.NopPruner(), budget_s=8.5)
    assert ledger.trials == 2 and ledger.wall == 9


def test_a_ledger_needs_its_clock_started():
    ledger = hpo_clock.ClockLedger("x", 10, budget_s=1)
    with pytest.raises(RuntimeError):
        ledger.elapsed()
    assert ledger.overhead == 0.0


def test_quasi_random_is_stratified_and_reproducible():
    """After the first (random) trial, 16 scrambled-Sobol points put exactly 2 in each of 8 equal bins of
    log(lr); random draws rarely do (the chance that 16 uniform draws land 2 per bin is ~0.2%)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = {"lr": optuna.distributions.FloatDistribution(1e-3, 1.0, log=True)}

    def lrs(sampler):
        study = optuna.create_study(sampler=sampler)
        return [study.ask(space).params["lr"] for _ in range(17)][1:]

    def bins(values):
        counts = [0] * 8
        for v in values:
            counts[min(7, int(8 * (math.log10(v) + 3) / 3))] += 1
        return counts

    first = lrs(hpo_clock.quasi_random(seed=3))
    assert bins(first) == [2] * 8
    assert first == lrs(hpo_clock.quasi_random(seed=3)) != lrs(hpo_clock.quasi_random(seed=4))
    assert bins(lrs(optuna.samplers.RandomSampler(seed=0))) != [2] * 8


def test_a_paired_difference_claims_only_what_its_interval_supports():
    base = [0.80, 0.81, 0.79, 0.80, 0.82, 0.80]
    up = hpo_clock.paired_difference(base, [b + 0.01 + 0.001 * i for i, b in enumerate(base)])
    assert up.word == "higher" and up.low > 0 and up.rounds == 6 and up.coverage > 0.95
    assert "+1.00" in up.sentence or "+1.0" in up.sentence
    down = hpo_clock.paired_difference(base, [b - 0.02 for b in base])
    assert down.word == "lower" and down.median == pytest.approx(-2.0)
    mixed = hpo_clock.paired_difference(
        base, [b + d for b, d in zip(base, [0.01, -0.01] * 3, strict=True)]
    )
    assert mixed.word == "no clear difference" and mixed.low < 0 < mixed.high
    few = hpo_clock.paired_difference(base[:4], [b + 0.05 for b in base[:4]])
    assert few.word == "too few rounds" and few.coverage < hpo_clock.MIN_COVERAGE
    assert few.verdict.word == few.word
    with pytest.raises(ValueError):
        hpo_clock.paired_difference(base, base[:3])


def test_isolation_rows_take_the_best_over_the_nuisance_per_bin():
    completed = [
        (0.7, {"lr": 0.1, "weight_decay": 1e-5}),
        (0.9, {"lr": 0.3, "weight_decay": 2e-5}),
        (0.8, {"lr": 0.1, "weight_decay": 1e-3}),
        (0.6, {"lr": 0.1, "weight_decay": 1e-1}),
    ]
    rows = hpo_clock.isolation(completed, "weight_decay", [1e-6, 1e-4, 1e-2, 1e-1])
    assert [r["best"] for r in rows] == [0.9, 0.8, 0.6]  # the last edge is inside the last bin
    assert rows[0]["config"]["lr"] == 0.3 and [r["trials"] for r in rows] == [2, 1, 1]
    assert hpo_clock.isolation(completed, "weight_decay", [1.0, 2.0])[0]["best"] is None
