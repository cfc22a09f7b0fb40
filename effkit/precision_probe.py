"""Pick a CPU recipe's precision from a short measurement, not from the CPU's feature flags.

bf16 units do not make bf16 autocast faster on every model, so "auto" on a CPU with bf16 units times a few
training steps of the recipe's own model in both precisions (interleaved, median) and keeps bf16 only where
it is at least ``BF16_PAYS`` times faster; the verdict is cached per CPU, torch version and model.
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from effkit.amp import choose_precision, cpu_features
from effkit.measure import device_name

BF16_PAYS = 1.15  # below this a measured gain is within a busy 2-core machine's noise
PROBE_BATCH = 32  # enough rows to pick the kernels the recipe runs; a fraction of its batch
CLEAR = (0.5, 3.0)  # a ratio outside this after one round needs no more rounds


def _steps(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, mode: str
) -> Callable[[int], None]:
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    policy = choose_precision("cpu", mode)
    x = x.to(policy.dtype) if policy.dtype else x

    def run(n: int) -> None:
        for _ in range(n):
            with policy.autocast():
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    return run


def bf16_speedup(
    model: torch.nn.Module, example: torch.Tensor, classes: int, rounds: int = 3
) -> float:
    """fp32 step time / bf16 step time for ``model`` on a batch shaped like ``example``: one warm-up
    step each (kernel selection), then up to ``rounds`` rounds of 2 steps in alternating order; medians."""
    torch.manual_seed(0)
    y = torch.randint(0, classes, (len(example),))
    runs = {mode: _steps(model, example, y, mode) for mode in ("off", "bf16")}
    times: dict[str, list[float]] = {"off": [], "bf16": []}
    for run in runs.values():
        run(1)
    for r in range(rounds):
        for mode in ("off", "bf16") if r % 2 == 0 else ("bf16", "off"):
            t0 = time.perf_counter()
            runs[mode](2)
            times[mode].append(time.perf_counter() - t0)
        ratio = statistics.median(times["off"]) / statistics.median(times["bf16"])
        if not CLEAR[0] <= ratio <= CLEAR[1]:
            break  # e.g. bf16 5x slower: more rounds would only cost seconds
    return ratio


def cpu_precision(
    key: str,
    make_model: Callable[[], torch.nn.Module],
    example: torch.Tensor,
    classes: int,
    cache_dir: Path | None = None,
) -> tuple[str, str]:
    """("bf16" or "off", why) for "auto" on this CPU; ``key`` names the model and its settings."""
    features = cpu_features()
    if not features["native_bf16"]:
        return "off", "fp32: this CPU has no bf16 units"
    ident = (
        f"{device_name('cpu')} | {features['torch_capability']} | torch {torch.__version__} | {key}"
    )
    path = Path(cache_dir) / "precision.json" if cache_dir else None
    cached = _read(path).get(ident) if path else None
    if cached is None:
        t0 = time.perf_counter()
        ratio = bf16_speedup(make_model(), example[:PROBE_BATCH], classes)
        cached = {"ratio": ratio, "seconds": time.perf_counter() - t0}
        if path:
            _write(path, {**_read(path), ident: cached})
    ratio = cached["ratio"]
    mode = "bf16" if ratio >= BF16_PAYS else "off"
    where = f", kept in {path}" if path else ""
    return mode, (
        f"{'bf16' if mode == 'bf16' else 'fp32'}: a bf16 training step ran {ratio:.2f}x as fast as fp32 "
        f"on this CPU (bf16 needs >= {BF16_PAYS}x; measured once in {cached['seconds']:.1f} s{where})"
    )


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{id(data)}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)  # atomic: two runs at once never read half a file
    except OSError:
        pass  # a read-only cache only costs the next run the probe again
