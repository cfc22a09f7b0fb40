"""Pick a CPU recipe's batch size from a short measurement, as `effkit.precision_probe` picks its precision.

A GPU needs a large batch to be busy, which is why airbench trains at 1024. A CPU core runs a small batch almost
as fast per sample as a large one, and a smaller batch takes more optimizer steps per epoch: below the critical
batch size a recipe then reaches its target in fewer epochs (McCandlish et al. 2018). On the CIFAR smoke
profile each halving of the batch (250 -> 125 -> 64) cut the samples to the target by about 1.2x (six seeds,
`benchmarks/results/cifar-batch-choice-epyc-zen3-2c.txt`), so a halving pays while it costs less than that per
sample. "auto" times a few training steps of the recipe's own model at each candidate batch (interleaved,
medians) and halves while a sample costs at most ``HALVING_PAYS`` times more; cached per CPU, torch and model.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from effkit.amp import cpu_features
from effkit.measure import device_name
from effkit.precision_probe import _read, _write

# A halving saved ~1.2x of the samples to the target (module docstring); allow a little less, so
# that measurement noise on a busy host does not buy a halving that the saving does not repay.
HALVING_PAYS = 1.15
ROUNDS = 3


def per_sample_seconds(
    make_model: Callable[[], torch.nn.Module],
    batches: list[int],
    layout: torch.memory_format,
    classes: int,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    rounds: int = ROUNDS,
) -> dict[int, float]:
    """Median seconds per training sample of ``make_model()`` at each batch size: SGD steps on random
    images (under the recipe's ``autocast``), one warm-up step each (kernel selection), then
    ``rounds`` rounds in alternating order."""
    torch.manual_seed(0)
    runs = {}
    for b in batches:
        model = copy.deepcopy(make_model())
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        x = torch.randn(b, 3, 32, 32).contiguous(memory_format=layout)
        y = torch.randint(0, classes, (b,))

        def step(model=model, opt=opt, x=x, y=y) -> None:
            with autocast():
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()
        runs[b] = step
    times: dict[int, list[float]] = {b: [] for b in batches}
    for r in range(rounds):
        for b in batches if r % 2 == 0 else batches[::-1]:
            t0 = time.perf_counter()
            runs[b]()
            runs[b]()
            times[b].append((time.perf_counter() - t0) / (2 * b))
    return {b: statistics.median(t) for b, t in times.items()}


def choose_batch(costs: dict[int, float]) -> int:
    """The largest batch, halved while the next smaller one costs at most HALVING_PAYS x per sample."""
    sizes = sorted(costs, reverse=True)
    chosen = sizes[0]
    for smaller in sizes[1:]:
        if costs[smaller] > HALVING_PAYS * costs[chosen]:
            break
        chosen = smaller
    return chosen


def cpu_batch(
    key: str,
    make_model: Callable[[], torch.nn.Module],
    batches: list[int],
    layout: torch.memory_format,
    classes: int,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    cache_dir: Path | None = None,
) -> tuple[int, str]:
    """(batch size, why) for this CPU among ``batches``; ``key`` names the model and its settings."""
    if len(batches) < 2:
        return batches[0], f"batch {batches[0]}: the profile's only candidate"
    ident = (
        f"{device_name('cpu')} | {cpu_features()['torch_capability']} | torch {torch.__version__}"
        f" | {key} | {sorted(batches)}"
    )
    path = Path(cache_dir) / "batch.json" if cache_dir else None
    cached = _read(path).get(ident) if path else None
    if cached is None:
        t0 = time.perf_counter()
        costs = per_sample_seconds(
            make_model, sorted(batches, reverse=True), layout, classes, autocast
        )
        cached = {"us_per_sample": {str(b): 1e6 * c for b, c in costs.items()}}
        cached["seconds"] = time.perf_counter() - t0
        if path:
            _write(path, {**_read(path), ident: cached})
    costs = {int(b): us for b, us in cached["us_per_sample"].items()}
    batch = choose_batch(costs)
    where = f", kept in {path}" if path else ""
    shown = ", ".join(f"{b}: {costs[b]:.0f}" for b in sorted(costs, reverse=True))
    return batch, (
        f"batch {batch}: µs per training sample on this CPU {shown}; a halving is kept while it costs "
        f"<= {HALVING_PAYS}x per sample (measured once in {cached['seconds']:.1f} s{where})"
    )
