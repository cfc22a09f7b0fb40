"""What every recipe shares: the Trainer protocol and the train-to-target loop.

A ``Trainer``'s ``train_steps(n)`` runs ``n`` optimizer steps, input pipeline included, and returns the work
done; ``evaluate()`` returns held-out accuracy. The caller times it with device synchronisation, and every
evaluation is on the clock: a recipe only knows it reached the target after the evaluation that says so.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Protocol

import torch
from tqdm.auto import tqdm

from effkit.measure import (
    device_name,
    mfu,
    peak_flops,
    peak_memory_bytes,
    reset_peak_memory,
    run_precision,
    sync,
)

_clock = time.perf_counter  # captured at import: immune to later monkeypatching


@dataclass
class Work:
    """What ``train_steps`` did: samples seen and (for text) non-padding tokens."""

    samples: int
    tokens: int = 0


class Trainer(Protocol):
    recipe: str  # "naive" or "optimized" (or a learner's name)
    device: torch.device
    steps_per_epoch: int
    total_steps: int  # the recipe's full schedule for its profile
    target: float  # accuracy target for the profile, in [0, 1]
    stop_at_target: bool  # optimized recipes stop as soon as the target is reached
    flops_per_sample: float | None  # model FLOPs per training sample (fwd + bwd), if known
    eval_every: int  # optimizer steps between evaluations (same number of samples per recipe)

    def train_steps(self, n: int) -> Work: ...

    def evaluate(self) -> float: ...

    def describe(self) -> dict: ...


@dataclass
class RunResult:
    recipe: str
    device: str
    steps: int
    samples: int
    tokens: int
    train_seconds: float  # synchronised wall time of the training steps only
    samples_per_s: float  # training throughput (steps only, after the first chunk)
    tokens_per_s: float | None
    accuracy: float  # final held-out accuracy, fraction in [0, 1]
    target: float
    time_to_target_s: float | None  # training + every evaluation up to the one at the target
    peak_memory_bytes: int
    flops_per_sample: float | None
    mfu: float | None  # against the dense peak of the precision the run used (None off CUDA)
    eval_seconds: float = 0.0  # all evaluation passes of the run (TTA included)
    wall_seconds: float = 0.0  # train_seconds + eval_seconds: what the run cost
    time_to_target_train_only_s: float | None = (
        None  # evaluation excluded: flattering, for reference
    )
    history: list[dict] = field(default_factory=list)  # {seconds, step, accuracy}
    config: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def check_build_args(
    workload: str, recipe: str, recipes: tuple[str, ...], hooks: dict, accepted: tuple[str, ...]
) -> None:
    """A workload's ``build`` refuses a recipe it lacks or a hook it does not know (a misspelt
    hook silently ignored would change what a learner measures)."""
    if recipe not in recipes:
        raise ValueError(
            f"unknown recipe {recipe!r} for the {workload} workload; choose one of {recipes}"
        )
    unknown = sorted(set(hooks) - set(accepted))
    if unknown:
        raise ValueError(
            f"unknown hook(s) {unknown} for the {workload} workload; accepted: {accepted}"
        )


def train_to_target(
    trainer: Trainer,
    *,
    eval_every: int | None = None,
    max_steps: int | None = None,
    progress: bool = True,
    device_label: str | None = None,
) -> RunResult:
    """Train ``trainer`` for its schedule, evaluating every ``eval_every`` steps.

    Every evaluation pass is on the clock: ``time_to_target_s`` is the synchronised wall time of
    all training steps *and* all evaluations up to and including the first evaluation at or above
    the target (airbench counts its TTA evaluation the same way). ``history`` records both clocks.
    The first chunk's throughput includes warm-up, so ``samples_per_s`` (training steps only) is
    computed over the chunks after the first when there are at least two.
    """
    total = max_steps or trainer.total_steps
    every = eval_every or getattr(trainer, "eval_every", None) or max(1, trainer.steps_per_epoch)
    dev = trainer.device
    reset_peak_memory(dev)
    elapsed, eval_s, step, samples, tokens = 0.0, 0.0, 0, 0, 0
    steady = [0.0, 0, 0]  # seconds, samples, tokens after the first chunk
    history: list[dict] = []
    ttt: float | None = None
    ttt_train: float | None = None
    acc = float("nan")
    bar = tqdm(total=total, desc=f"{trainer.recipe}", unit="step", disable=not progress)
    while step < total:
        n = min(every, total - step)
        sync(dev)
        t0 = _clock()
        work = trainer.train_steps(n)
        sync(dev)
        dt = _clock() - t0
        elapsed += dt
        step += n
        samples += work.samples
        tokens += work.tokens
        if history:  # skip the first chunk: it pays for warm-up
            steady[0] += dt
            steady[1] += work.samples
            steady[2] += work.tokens
        t0 = _clock()
        acc = trainer.evaluate()
        sync(dev)
        eval_s += _clock() - t0
        history.append(
            {"seconds": elapsed + eval_s, "train_seconds": elapsed, "step": step, "accuracy": acc}
        )
        bar.update(n)
        bar.set_postfix(acc=f"{acc:.3f}")
        if ttt is None and acc >= trainer.target:
            ttt, ttt_train = elapsed + eval_s, elapsed
            if trainer.stop_at_target:
                break
    bar.close()
    secs, n_samples, n_tokens = steady if steady[0] > 0 else (elapsed, samples, tokens)
    sps = n_samples / secs if secs > 0 else float("nan")
    name = device_label or str(dev)
    return RunResult(
        recipe=trainer.recipe,
        device=name,
        steps=step,
        samples=samples,
        tokens=tokens,
        train_seconds=elapsed,
        samples_per_s=sps,
        tokens_per_s=(n_tokens / secs) if tokens and secs > 0 else None,
        accuracy=acc,
        target=trainer.target,
        time_to_target_s=ttt,
        peak_memory_bytes=peak_memory_bytes(dev),
        flops_per_sample=trainer.flops_per_sample,
        mfu=mfu(trainer.flops_per_sample or 0.0, sps, _peak(trainer, dev)),
        eval_seconds=eval_s,
        wall_seconds=elapsed + eval_s,
        time_to_target_train_only_s=ttt_train,
        history=history,
        config=trainer.describe(),
    )


def _peak(trainer: Trainer, dev: torch.device) -> float | None:
    """The device's dense peak in the precision this trainer ran (None off CUDA or unknown)."""
    policy = getattr(trainer, "policy", None)
    model = getattr(trainer, "model", None)
    convs = model is not None and any(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    precision = run_precision(
        getattr(policy, "mode", "off"), dev.type, "conv" if convs else "matmul"
    )
    return peak_flops(device_name(dev), precision=precision, device_type=dev.type)
