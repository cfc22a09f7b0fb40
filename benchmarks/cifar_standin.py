"""Can the offline CIFAR stand-in fail? The naive recipe and three planted bugs, easy vs hard set.

For each synthetic set (``make_synthetic_cifar``, official format, default 50,000 + 10,000 images)
this trains the naive recipe (``cifar.build("naive", ...)``: ResNet + SGD 0.1 + cosine, batch 128)
for a fixed number of steps and reports test accuracy on all test images at eighths of the
schedule (1/8, 1/4, 1/2, 3/4, 1), then trains it with each planted bug and reports the accuracy lost:

* ``no-normalise``: the training pipeline feeds images in [0, 1] (``ToTensor`` without
  ``Normalize``) while the evaluation normalises, the classic lesson-2 slip;
* ``short-schedule``: the cosine is sized for batch 1024's step count (8x too few steps), so the
  LR is 0 for the last 7/8 of the run;
* ``test-augment``: the correct run's model evaluated on randomly cropped and flipped test images.

The net and the step budget are what a 2-core CPU affords (``--net smoke``: the smoke profile's
ResNet-10, width 16); the input pipeline is ``DevicePipeline`` with the naive recipe's
augmentation (zero padding 4, random flips), so no DataLoader workers compete for the cores.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/cifar_standin.py --out benchmarks/results/X.txt
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from effkit.schedules import warmup_cosine  # noqa: E402
from effkit.workloads import cifar  # noqa: E402
from effkit.workloads.cifar.data import CIFAR_MEAN, CIFAR_STD, make_synthetic_cifar  # noqa: E402
from effkit.workloads.cifar.pipelines import DevicePipeline, DeviceTestSet, normalize  # noqa: E402

FRACTIONS = [1 / 8, 1 / 4, 1 / 2, 3 / 4, 1]  # each evaluation costs a tenth of a run here


class UnnormalisedPipeline(DevicePipeline):
    """Planted bug: batches in [0, 1] (as ``ToTensor`` alone gives), not mean/std-normalised."""

    def __iter__(self):
        mean = torch.tensor(CIFAR_MEAN, device=self.device).view(1, 3, 1, 1)
        std = torch.tensor(CIFAR_STD, device=self.device).view(1, 3, 1, 1)
        for x, y in super().__iter__():
            yield x * std + mean, y


class AugmentedTestSet(DeviceTestSet):
    """Planted bug: the training augmentation (crop with padding 4, flip) on the test images."""

    def __init__(self, dataset, device, seed: int):
        super().__init__(dataset, device)
        self.aug = DevicePipeline(dataset, 1000, device, seed)  # its augment(), on test images

    def batches(self, dtype=torch.float32):
        gen = torch.Generator(device=self.device).manual_seed(12345)  # the same draw every call
        for i in range(0, len(self.labels), self.batch_size):
            idx = torch.arange(i, min(i + self.batch_size, len(self.labels)), device=self.device)
            shifts = torch.randint(0, 9, (len(idx), 2), device=self.device, generator=gen)
            flips = torch.rand(len(idx), device=self.device, generator=gen) < 0.5
            yield normalize(self.aug.augment(idx, shifts, flips), dtype), self.labels[idx]


def train(root: Path, steps: int, seed: int, bug: str | None, evals: list[float]) -> dict:
    """One naive run of ``steps`` steps; accuracy at each fraction in ``evals`` (and the trainer)."""
    per_epoch = math.ceil(len(cifar.load_cifar(root, train=True)) / 128)
    epochs = (steps - 1e-6) / per_epoch  # the recipe rounds its step count up
    pipeline = UnnormalisedPipeline if bug == "no-normalise" else DevicePipeline
    trainer = cifar.build(
        "naive", "smoke", data_dir=root, device="cpu", seed=seed, pipeline=pipeline, epochs=epochs
    )
    assert trainer.total_steps == steps, (trainer.total_steps, steps)
    if bug == "short-schedule":
        trainer.scheduler = warmup_cosine(trainer.optimizer, max(1, steps // 8), 0)
    curve, t0 = [], time.perf_counter()
    for frac in evals:
        trainer.train_steps(round(frac * steps) - trainer.step)
        curve.append((frac, trainer.evaluate()))
    return {"curve": curve, "trainer": trainer, "seconds": time.perf_counter() - t0}


def first_within(curve: list[tuple[float, float]], pp: float) -> float:
    """The first schedule fraction whose accuracy is within ``pp`` points of the final one."""
    final = curve[-1][1]
    return next(f for f, acc in curve if acc >= final - pp / 100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-train", type=int, default=50_000)
    ap.add_argument("--n-test", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=200, help="steps of batch 128 per run")
    ap.add_argument("--seed", type=int, default=0, help="training seed (data seed: 0)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--difficulty", nargs="+", default=["hard", "easy"])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.out:
        args.out.write_text("")

    def say(text: str) -> None:  # written as it comes: a run cut short keeps what it measured
        print(text, flush=True)
        if args.out:
            with args.out.open("a") as f:
                f.write(text + "\n")

    say(
        f"cifar_standin: {args.n_train} train / {args.n_test} test images, naive recipe with the "
        f"smoke net (ResNet-10, width 16), {args.steps} steps of batch 128 "
        f"({args.steps * 128 / args.n_train:.2f} epochs), cosine to 0, SGD lr 0.1; training seed "
        f"{args.seed}, data seed 0; CPU {platform.processor() or platform.machine()}, "
        f"{args.threads} thread(s), torch {torch.__version__}"
    )
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cifar-standin-") as tmp:
        for difficulty in args.difficulty:
            t0 = time.perf_counter()
            root = make_synthetic_cifar(
                Path(tmp) / difficulty, args.n_train, args.n_test, 0, difficulty=difficulty
            )
            say(f"\n[{difficulty}] data generated and written in {time.perf_counter() - t0:.1f} s")
            ok = train(root, args.steps, args.seed, None, FRACTIONS)
            curve = ok["curve"]
            say(
                "  correct run, accuracy at these fractions of the schedule: "
                + ", ".join(f"{f:.3g}: {a:.1%}" for f, a in curve)
                + f" ({ok['seconds']:.0f} s)"
            )
            say(
                f"  within 1 pp of its final accuracy from {first_within(curve, 1):.0%} of the "
                f"schedule, within 3 pp from {first_within(curve, 3):.0%}"
            )
            final = curve[-1][1]
            trainer = ok["trainer"]
            trainer.test_set = AugmentedTestSet(cifar.load_cifar(root, train=False), "cpu", 0)
            results = {"test-augment": trainer.evaluate()}
            for bug in ("no-normalise", "short-schedule"):
                results[bug] = train(root, args.steps, args.seed, bug, [1.0])["curve"][-1][1]
            for bug, acc in results.items():
                say(
                    f"  bug {bug:13}: {acc:.1%} vs correct {final:.1%}: "
                    f"{100 * (acc - final):+.1f} pp"
                )
    say(f"\ntotal {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
