"""effkit.hpo: the tuning task, the cost ledger, the Optuna objective and the shared-storage worker."""

import json

import optuna
import pytest

from effkit import dashboard, hpo

TINY = dict(n_train=256, n_val=256, n_test=256, max_epochs=3)


def test_a_trial_is_deterministic_per_seed_and_learns():
    task = hpo.TuningTask(seed=3, **TINY)
    config = {"lr": 0.1, "batch_size": 64, "weight_decay": 1e-4}
    a = [task.trial(config, seed=1).step() for _ in range(1)]
    b = [task.trial(config, seed=1).step() for _ in range(1)]
    assert a == b
    val, test = hpo.full_run(task, config, seed=1)
    assert val > 1 / task.classes + 0.1 and test > 1 / task.classes + 0.1


def test_a_diverged_trial_scores_chance():
    task = hpo.TuningTask(seed=3, **TINY)
    trial = task.trial({"lr": 1e6, "batch_size": 32, "weight_decay": 0.0}, seed=0)
    scores = [trial.step() for _ in range(3)]
    assert trial.diverged and scores[-1] == pytest.approx(1 / task.classes)


def test_the_ledger_counts_cost_to_target_and_savings():
    ledger = hpo.Ledger("x", samples_per_epoch=100)
    for _ in range(3):
        ledger.charge(0.5)
    ledger.finish({"lr": 1}, 0.7)
    for _ in range(3):
        ledger.charge(0.5)
    ledger.finish({"lr": 2}, 0.8)
    assert ledger.cost_to(0.75) == (6, 3.0) and ledger.cost_to(0.9) is None
    assert ledger.best_config == {"lr": 2} and ledger.saved == 0.0
    ledger.skipped = 6
    assert ledger.saved == pytest.approx(0.5)


def _study(pruner):
    return optuna.create_study(
        direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0), pruner=pruner
    )


def test_pruned_epochs_are_saved_and_a_budget_cut_is_not():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    task = hpo.TuningTask(seed=1, **TINY)

    class Always(optuna.pruners.BasePruner):
        def prune(self, study, trial):
            return True

    ledger = hpo.Ledger("pruned", len(task.x))
    _study(Always()).optimize(hpo.optuna_objective(task, ledger, budget=5), n_trials=50)
    assert ledger.epochs == 5 and ledger.trials == 5 and ledger.complete == 0
    assert ledger.skipped == 4 * (
        task.max_epochs - 1
    )  # four stopped after epoch 1 of 3; the fifth cut by the budget
    ledger = hpo.Ledger("unpruned", len(task.x))
    _study(optuna.pruners.NopPruner()).optimize(
        hpo.optuna_objective(task, ledger, budget=7), n_trials=50
    )
    assert (
        ledger.epochs == 7 and ledger.complete == 2 and ledger.skipped == 0
    )  # the third trial cut at 7


def test_a_search_is_a_recipe_the_dashboard_reads(tmp_path):
    task = hpo.TuningTask(seed=1, **TINY)
    ledger = hpo.Ledger("TPE", len(task.x))
    _study(optuna.pruners.NopPruner()).optimize(
        hpo.optuna_objective(task, ledger, budget=6), n_trials=10
    )
    target = ledger.best - 0.01
    path = tmp_path / "searches.json"
    path.write_text(
        json.dumps(
            {
                "workload": "lesson12-hpo",
                "profile": "smoke",
                "device": "cpu",
                "recipes": {"TPE": ledger.as_recipe(target)},
            }
        )
    )
    (row,) = dashboard.rows(dashboard.find_results([tmp_path]))
    epochs, seconds = ledger.cost_to(target)
    assert row["samples_to_target"] == epochs * len(task.x) and row["seconds_to_target"] == seconds


def test_workers_share_one_study_through_the_storage(tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(study_name="s", storage=storage, direction="maximize")
    for seed in (0, 1):
        assert (
            hpo.main(
                [
                    "worker",
                    "--storage",
                    storage,
                    "--study",
                    "s",
                    "--trials",
                    "2",
                    "--seed",
                    str(seed),
                    "--n-train",
                    "128",
                    "--max-epochs",
                    "2",
                ]
            )
            == 0
        )
    assert len(optuna.load_study(study_name="s", storage=storage).trials) == 4
    assert "the study now holds 4 trials" in capsys.readouterr().out


def test_a_fixed_batch_size_is_held_not_searched(tmp_path):
    task = hpo.TuningTask(seed=1, **TINY)
    ledger = hpo.Ledger("fixed", len(task.x))
    study = _study(optuna.pruners.NopPruner())
    study.optimize(hpo.optuna_objective(task, ledger, fixed={"batch_size": 128}), n_trials=3)
    assert all(set(t.params) == {"lr", "weight_decay"} for t in study.trials)
    assert [c["batch_size"] for _, c in ledger.completed] == [128] * 3
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(study_name="f", storage=storage, direction="maximize")
    args = ["worker", "--storage", storage, "--study", "f", "--trials", "2", "--n-train", "128"]
    assert hpo.main(args + ["--max-epochs", "2", "--batch-size", "64"]) == 0
    trials = optuna.load_study(study_name="f", storage=storage).trials
    assert len(trials) == 2 and all("batch_size" not in t.params for t in trials)
