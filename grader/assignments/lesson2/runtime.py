"""Runtime of pipeline assignments on the CIFAR workload: what workers and the parent call.

The learner's pipeline runs inside the unchanged naive recipe, so any speed-up is the pipeline's;
the parent evaluates on data the learner never had. Weights from a worker are loaded only with
``weights_only=True`` and strict key/shape checks.
"""

from __future__ import annotations

import secrets
import types
from pathlib import Path

import torch

from effkit.workloads import cifar
from effkit.workloads.cifar.pipelines import DevicePipeline, DeviceTestSet
from grader.kit.audit import EpochAudit as EpochAudit  # re-exported for the worker
from grader.kit.data import grader_images, write_train_set

# Imported at module level on purpose: the worker snapshots these modules' functions before any
# learner code runs, so replacing one of them from a solution cell is detected and reported.


def build_trainer(
    learner_obj, audit: EpochAudit, data_dir: str, device: str, seed: int, profile: str, hooks: dict
):
    inner = learner_obj if learner_obj is not None else cifar.TorchvisionPipeline
    return cifar.build(
        "naive",
        profile,
        data_dir=data_dir,
        device=device,
        seed=seed,
        pipeline=audit.wrap(inner),
        **hooks,
    )


def model_of(trainer) -> torch.nn.Module:
    return trainer.model


def reuses_reference(obj) -> str:
    """A reason to refuse the answer when it *is* effkit's reference pipeline, else ''."""
    if isinstance(obj, type) and issubclass(obj, DevicePipeline):
        return (
            "your FastPipeline is (a subclass of) effkit's DevicePipeline, the reference answer: "
            "write your own pipeline to earn the performance points"
        )
    if getattr(obj, "func", None) is DevicePipeline or obj is DevicePipeline:
        return (
            "your FastPipeline wraps effkit's DevicePipeline, the reference answer: write your own"
        )
    return ""


class InvalidWeights(ValueError):
    pass


class GraderData:
    """The grader's data for one grading; every seed is fresh and secret."""

    def __init__(self, workdir: Path, spec, device: str):
        self.workdir, self.spec, self.device = Path(workdir), spec, device
        # What the workers may read (read-only, see grader.sandbox.launch.launch): training sets and the
        # initial weights. The held-out set and every worker's weights stay outside it.
        self.inputs = self.workdir / "inputs"
        self.inputs.mkdir(mode=0o755, parents=True, exist_ok=True)
        self.warmup_dir = write_train_set(
            self.inputs / "warmup", spec.n_warmup, secrets.randbits(31), spec.data
        )
        self.train_dirs: list[Path] = []
        self.seeds: list[int] = []
        self.init_paths: list[Path] = []
        self.trainers = []
        self.eval_sets = []  # one held-out set per look (grader.timed.gate's second look is independent)
        self.add_look()

    def add_look(self) -> range:
        """``spec.repeats`` more paired runs on fresh data: training sets, seeds, initial weights
        and a held-out set of their own. Returns the new runs' indices."""
        spec, first = self.spec, len(self.train_dirs)
        hooks = dict(spec.hooks, epochs=spec.epochs)
        for r in range(first, first + spec.repeats):
            path = write_train_set(
                self.inputs / f"train{r}", spec.n_train, secrets.randbits(31), spec.data
            )
            seed = secrets.randbelow(2**31)
            # A clean trainer per repeat (no learner code in this process): its initial weights are
            # shared by both workers, so run r of A and B differ only in the input pipeline; later
            # it evaluates the weights both workers saved.
            trainer = cifar.build(
                "naive", spec.profile, data_dir=path, device=self.device, seed=seed, **hooks
            )
            init = self.inputs / f"init{r}.pt"
            torch.save({k: v.detach().cpu() for k, v in trainer.model.state_dict().items()}, init)
            self.train_dirs.append(path)
            self.seeds.append(seed)
            self.init_paths.append(init)
            self.trainers.append(trainer)
        images, labels = grader_images(
            spec.n_eval, secrets.randbits(31), spec.data
        )  # never written to disk
        held_out = types.SimpleNamespace(data=images, targets=labels.tolist())
        self.eval_sets.append(DeviceTestSet(held_out, self.device))
        return range(first, first + spec.repeats)

    def weights_path(self, role: str, r: int) -> Path:
        return self.workdir / f"{role}-{r}.pt"  # written by the parent from the worker's pipe

    def evaluate(self, path: Path, r: int) -> float:
        """Accuracy of the saved weights on the held-out set, by the recipe's own evaluate()."""
        trainer = self.trainers[r]
        try:
            state = torch.load(path, map_location=self.device, weights_only=True)
            trainer.model.load_state_dict(state, strict=True)
        except FileNotFoundError as err:
            raise InvalidWeights(f"no trained weights were saved ({path.name})") from err
        except Exception as err:  # unpickling refused, wrong keys or shapes
            raise InvalidWeights(
                f"the trained weights do not fit the recipe's model: {err}"
            ) from err
        trainer.test_set = self.eval_sets[r // self.spec.repeats]
        return float(trainer.evaluate())


def prepare_learner_data() -> None:
    cifar.prepare_data("smoke")


def learner_run(ns: dict | None) -> float:
    """What the learner runs themselves (``grader budget``): the naive smoke recipe, with the
    solution's ``FastPipeline`` when ``ns`` (its namespace) is given. Returns the accuracy."""
    from effkit.workloads.common import train_to_target

    trainer = cifar.build("naive", "smoke", pipeline=(ns or {}).get("FastPipeline"))
    return train_to_target(trainer, eval_every=trainer.eval_every, progress=False).accuracy
