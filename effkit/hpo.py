"""Hyperparameter search on a budget: a small tuning task, every trial's cost on the clock, Optuna objectives.

`TuningTask` is a classification problem cheap enough for hundreds of trials on a CPU; its trials train one
epoch per ``step()``. `Ledger` records every epoch a search paid for, so searches compare by cost to target;
`optuna_objective` wraps a task for ``study.optimize`` (with pruning), and ``python -m effkit.hpo worker``
runs trials against a shared study. Re-run a winner on new seeds before believing it.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from effkit.measure import one_thread

SPACE = {
    "lr": {"type": "float", "low": 1e-3, "high": 3.0, "log": True},
    "batch_size": {"type": "categorical", "choices": [32, 64, 128, 256, 512]},
    "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
}


class TuningTask:
    """A classification task drawn from ``seed``: train / validation / held-out splits."""

    def __init__(
        self,
        seed: int = 0,
        dim: int = 16,
        classes: int = 4,
        width: int = 64,
        n_train: int = 2048,
        n_val: int = 2048,
        n_test: int = 4096,
        label_noise: float = 0.05,
        max_epochs: int = 9,
        loss_scale: float = 1.0,
    ):
        g = torch.Generator().manual_seed(seed)
        w1 = torch.randn(dim, 32, generator=g) / math.sqrt(dim)
        w2 = torch.randn(32, classes, generator=g) / math.sqrt(32)
        x = torch.randn(n_train + n_val + n_test, dim, generator=g)
        y = (torch.relu(x @ w1) @ w2).argmax(1)
        flip = torch.rand(len(y), generator=g) < label_noise
        y = torch.where(flip, torch.randint(0, classes, y.shape, generator=g), y)
        a, b = n_train, n_train + n_val
        self.x, self.y, self.x_val, self.y_val = x[:a], y[:a], x[a:b], y[a:b]
        self.x_test, self.y_test = x[b:], y[b:]
        self.dim, self.classes, self.width, self.max_epochs = dim, classes, width, max_epochs
        # a constant c times the loss (a sum instead of a mean, a loss weight): SGD with momentum on c * loss at
        # (lr, wd) takes the steps it takes on the loss at (lr * c, wd / c) (the weight decay is added to the
        # gradient, which c does not multiply), so the best learning rate moves by 1 / c, the best weight decay
        # by c, and the accuracies reachable do not change (up to float rounding, and where (lr * c, wd / c) stays
        # inside the search space: at its edges a clipped weight decay shifts what is reachable)
        self.loss_scale = loss_scale

    def trial(self, config: dict, seed: int) -> Trial:
        return Trial(self, config, seed)


class Trial:
    """One configuration, trained one epoch per ``step()`` (cosine schedule over ``max_epochs``)."""

    def __init__(self, task: TuningTask, config: dict, seed: int):
        self.task, self.config, self.epochs, self.diverged = task, config, 0, False
        torch.manual_seed(seed)
        self.net = nn.Sequential(
            nn.Linear(task.dim, task.width),
            nn.ReLU(),
            nn.Linear(task.width, task.width),
            nn.ReLU(),
            nn.Linear(task.width, task.classes),
        )
        self.opt = torch.optim.SGD(
            self.net.parameters(),
            lr=config["lr"],
            momentum=0.9,
            weight_decay=config["weight_decay"],
        )
        steps = math.ceil(len(task.x) / config["batch_size"]) * task.max_epochs
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=steps)
        self.gen = torch.Generator().manual_seed(seed + 1)

    def step(self) -> float:
        """Train one epoch; the validation accuracy after it (chance once the loss blew up)."""
        t = self.task
        with one_thread(), torch.enable_grad():
            if not self.diverged:
                for idx in torch.randperm(len(t.x), generator=self.gen).split(
                    self.config["batch_size"]
                ):
                    self.opt.zero_grad()
                    loss = F.cross_entropy(self.net(t.x[idx]), t.y[idx]) * t.loss_scale
                    if not torch.isfinite(loss):
                        self.diverged = True
                        break
                    loss.backward()
                    self.opt.step()
                    self.sched.step()
            self.epochs += 1
            return self.accuracy(t.x_val, t.y_val)

    def accuracy(self, x: torch.Tensor, y: torch.Tensor) -> float:
        if self.diverged:
            return 1.0 / self.task.classes
        with torch.no_grad(), one_thread():
            return float((self.net(x).argmax(1) == y).float().mean())

    def test_accuracy(self) -> float:
        return self.accuracy(self.task.x_test, self.task.y_test)


def full_run(task: TuningTask, config: dict, seed: int) -> tuple[float, float]:
    """(final validation accuracy, held-out accuracy) after ``max_epochs`` epochs."""
    trial = task.trial(config, seed)
    val = [trial.step() for _ in range(task.max_epochs)][-1]
    return val, trial.test_accuracy()


@dataclass
class Ledger:
    """Every epoch a search paid for: cumulative epochs, samples and seconds, and the best complete trial."""

    name: str
    samples_per_epoch: int
    epochs: int = 0
    seconds: float = 0.0
    trials: int = 0
    complete: int = 0
    best: float = 0.0
    best_config: dict | None = None
    curve: list[tuple[int, float, float]] = field(
        default_factory=list
    )  # (epochs, seconds, best so far)
    completed: list[tuple[float, dict]] = field(
        default_factory=list
    )  # (final validation score, config)
    skipped: int = (
        0  # epochs the pruner's stops saved: what the same trials would have cost on top, unpruned
    )

    @property
    def saved(self) -> float:
        """Share of the same trials' unpruned cost that pruning saved (a trial cut by the budget: none)."""
        return self.skipped / (self.epochs + self.skipped) if self.epochs else 0.0

    def charge(self, seconds: float) -> None:
        self.epochs += 1
        self.seconds += seconds

    def finish(self, config: dict, score: float) -> None:
        self.complete += 1
        self.completed.append((score, dict(config)))
        if score > self.best:
            self.best, self.best_config = score, dict(config)
        self.curve.append((self.epochs, self.seconds, self.best))

    def cost_to(self, target: float) -> tuple[int, float] | None:
        """(epochs, seconds) when a complete trial first reached ``target``; None if never."""
        return next(((e, s) for e, s, b in self.curve if b >= target), None)

    def as_recipe(self, target: float) -> dict:
        """This search as one recipe of a ``result.json`` that ``python -m effkit.dashboard`` reads:
        accuracy = the best complete trial so far, samples and seconds = everything paid for."""
        reached = self.cost_to(target)
        history = [
            {"samples": e * self.samples_per_epoch, "seconds": s, "accuracy": b}
            for e, s, b in self.curve
        ]
        return {
            "target": target,
            "time_to_target_s": reached[1] if reached else None,
            "time_to_target_train_only_s": None,  # each epoch's evaluation is inside its seconds
            "final_accuracy": self.best,
            "history": history,
            "samples_per_s": self.epochs * self.samples_per_epoch / self.seconds
            if self.seconds
            else None,
            "config": {"trials": self.trials, "complete": self.complete, "epochs": self.epochs},
        }


def suggest(trial, space: dict = SPACE) -> dict:
    """An Optuna trial's configuration from ``space`` (the dict format of ``SPACE``)."""
    out = {}
    for name, dim in space.items():
        if dim["type"] == "categorical":
            out[name] = trial.suggest_categorical(name, dim["choices"])
        else:
            out[name] = trial.suggest_float(
                name, dim["low"], dim["high"], log=dim.get("log", False)
            )
    return out


def optuna_objective(
    task: TuningTask,
    ledger: Ledger,
    budget: int | None = None,
    seed: int = 0,
    fixed: dict | None = None,
):
    """``study.optimize``'s objective: trains epoch by epoch, charges ``ledger``, reports, prunes.
    At ``budget`` epochs it cuts the running trial and stops the study (``study.stop()``). The
    hyperparameters in ``fixed`` (a batch size held for the round, say) are held, not searched."""
    import optuna

    fixed = fixed or {}
    space = {name: dim for name, dim in SPACE.items() if name not in fixed}

    def objective(trial):
        config = suggest(trial, space) | fixed
        run = task.trial(config, seed=seed * 100_003 + trial.number)
        ledger.trials += 1
        score = 0.0
        for epoch in range(1, task.max_epochs + 1):
            start = time.perf_counter()
            score = run.step()  # the evaluation after the epoch is on the clock too
            ledger.charge(time.perf_counter() - start)
            trial.report(score, epoch)
            if epoch < task.max_epochs and budget is not None and ledger.epochs >= budget:
                trial.study.stop()  # the budget is spent: this trial is cut (recorded as pruned)
                raise optuna.TrialPruned()
            if epoch < task.max_epochs and trial.should_prune():
                ledger.skipped += task.max_epochs - epoch
                raise optuna.TrialPruned()
        ledger.finish(config, score)
        return score

    return objective


def main(argv: list[str] | None = None) -> int:
    """A worker of a shared study: run the same command on every machine, with the same storage.
    Create the study once first (``optuna create-study``): workers creating a fresh storage's
    schema at the same moment race on SQLite."""
    import optuna

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("command", choices=["worker"])
    ap.add_argument(
        "--storage", required=True, help="sqlite:///study.db here; postgresql://... across machines"
    )
    ap.add_argument("--study", default="effkit-hpo")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--task-seed", type=int, default=0)
    ap.add_argument(
        "--seed", type=int, default=0, help="this worker's sampler seed (differ per worker)"
    )
    ap.add_argument(
        "--n-train", type=int, default=2048, help="training (and validation) samples of the task"
    )
    ap.add_argument("--max-epochs", type=int, default=9)
    ap.add_argument(
        "--batch-size", type=int, help="hold the batch size at this value (not searched)"
    )
    args = ap.parse_args(argv)
    fixed = {} if args.batch_size is None else {"batch_size": args.batch_size}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=args.study,
        storage=args.storage,
        direction="maximize",
        load_if_exists=True,
        sampler=optuna.samplers.TPESampler(seed=args.seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(),
    )
    task = TuningTask(
        args.task_seed, n_train=args.n_train, n_val=args.n_train, max_epochs=args.max_epochs
    )
    ledger = Ledger(f"worker {args.seed}", len(task.x))
    study.optimize(
        optuna_objective(task, ledger, seed=args.seed, fixed=fixed), n_trials=args.trials
    )
    print(
        f"worker {args.seed}: {ledger.trials} trials, {ledger.epochs} epochs, {ledger.seconds:.1f} s; "
        f"the study now holds {len(study.trials)} trials"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
