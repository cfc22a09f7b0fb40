"""What every timed lesson's runtime shares: one grading's secret data, and weights read back safely.

A runtime subclasses :class:`GraderData` with how its sets are written and how a clean trainer is
built; the base draws every seed, saves the initial weights both workers start from, and evaluates
the weights a worker trained (safetensors, parsed: nothing unpickled; strict keys and shapes) on a held-out set no
worker can read. Workers import this module too (it is in their view of the repository).
"""

from __future__ import annotations

import secrets
from pathlib import Path

import torch

from grader.sandbox.commit import load_state


class InvalidWeights(ValueError):
    """A worker's weights cannot be evaluated: missing, refused by the parser, wrong shapes."""


class GraderData:
    """The grader's data for one grading; every seed is fresh and secret."""

    def __init__(self, workdir: Path, spec, device: str):
        self.workdir, self.spec, self.device = Path(workdir), spec, device
        # What the workers may read (read-only, see grader.sandbox.launch.launch): training sets and
        # the initial weights. The held-out sets and every worker's weights stay outside it.
        self.inputs = self.workdir / "inputs"
        self.inputs.mkdir(mode=0o755, parents=True, exist_ok=True)
        self.warmup_dir = self.write_warmup(self.inputs / "warmup")
        self.train_dirs: list[Path] = []
        self.seeds: list[int] = []
        self.init_paths: list[Path] = []
        self.trainers = []
        self.add_look()

    def add_look(self) -> range:
        """``spec.repeats`` more paired runs on fresh data: training sets, seeds, initial weights and
        a held-out set of their own (the accuracy gate's second look is independent of the first).
        Returns the new runs' indices."""
        first = len(self.train_dirs)
        runs = range(first, first + self.spec.repeats)
        self.new_look()
        for r in runs:
            seed = secrets.randbelow(2**31)
            # A clean trainer per run (no learner code in this process): its initial weights are
            # shared by both workers, and later it evaluates the weights both workers saved.
            path, trainer = self.new_run(r, seed)
            init = self.inputs / f"init{r}.pt"
            torch.save({k: v.detach().cpu() for k, v in trainer.model.state_dict().items()}, init)
            self.train_dirs.append(path)
            self.seeds.append(seed)
            self.init_paths.append(init)
            self.trainers.append(trainer)
        return runs

    def weights_path(self, role: str, r: int) -> Path:
        return self.workdir / f"{role}-{r}.pt"  # written by the parent from the worker's pipe

    def evaluate(self, path: Path, r: int) -> float:
        """Accuracy of the saved weights on run ``r``'s held-out set, by the recipe's own evaluation."""
        try:
            state = load_state(path)["model"]  # safetensors, parsed: nothing unpickled
        except FileNotFoundError as err:
            raise InvalidWeights(f"no trained weights were saved ({path.name})") from err
        except Exception as err:  # unpickling refused
            raise InvalidWeights(f"the trained weights cannot be read: {err}") from err
        return self.evaluate_state(state, r)

    def evaluate_state(self, state: dict, r: int) -> float:
        """Accuracy of a committed model state (tensors the parent parsed) on run ``r``'s held-out set."""
        trainer = self.trainers[r]
        try:
            trainer.model.load_state_dict(state, strict=True)
        except Exception as err:  # unpickling refused, wrong keys or shapes
            raise InvalidWeights(
                f"the trained weights do not fit the recipe's model: {err}"
            ) from err
        return float(self.held_out_accuracy(trainer, r))

    # -- what a lesson's runtime says ---------------------------------------------------------
    def write_warmup(self, folder: Path) -> Path:
        """Write the (unscored) warm-up set into ``folder``."""
        raise NotImplementedError

    def new_look(self) -> None:
        """Draw what a look shares besides its runs (a held-out set), before its runs are built."""

    def new_run(self, r: int, seed: int) -> tuple[Path, object]:
        """Write run ``r``'s training set under ``self.inputs`` and build its clean trainer."""
        raise NotImplementedError

    def held_out_accuracy(self, trainer, r: int) -> float:
        """The trainer's accuracy, with run ``r``'s weights loaded, on its look's held-out set."""
        raise NotImplementedError
