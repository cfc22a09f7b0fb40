"""Measurement: synchronised timers, throughput, time-to-target, data-wait split, memory, MFU, cost.

The primitives every lesson and benchmark measures with: timers that synchronise the device (else you time
the launch), throughput that skips warm-up, time to target, the data-wait/compute split, peak memory, model
FLOPs and MFU against a table of dense peak FLOP/s per GPU model and precision, and cost to target.
"""

from __future__ import annotations

import contextlib
import platform
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch

from effkit.amp import cpu_isa
from effkit.peak_memory import peak_memory_bytes, reset_peak_memory  # noqa: F401  (re-exported)

# Dense (no sparsity) peak FLOP/s per precision, by exact GPU model. Sources: NVIDIA datasheets
# (H100/H200 SXM, PCIe and NVL, A100, A10, L4, L40, L40S, V100, T4) and the Ada / Ampere GeForce
# whitepapers (RTX 4090 / 3090: tensor FLOP/s with fp32 accumulation, what PyTorch uses).
# "fp32" is the non-tensor-core rate; "tf32" the tensor-core rate for fp32 matmuls when TF32 is
# enabled. A precision a model lacks natively (bf16 on V100/T4) is absent: no peak, no MFU.
# The A10G (AWS) has no public datasheet: it is deliberately absent rather than given the A10's.
_T = 1e12


def _tensor_core(fp32: float, tf32: float, half: float) -> dict[str, float]:
    """FLOP/s peaks, from datasheet TFLOP/s, of a GPU with TF32 and bf16 = fp16 tensor cores."""
    return {"fp32": fp32 * _T, "tf32": tf32 * _T, "bf16": half * _T, "fp16": half * _T}


PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H100 SXM": _tensor_core(67, 494.7, 989.4),
    "H100 PCIe": _tensor_core(51, 378, 756),
    "H100 NVL": _tensor_core(60, 417.5, 835.5),
    "H200 SXM": _tensor_core(67, 494.7, 989.4),  # the H100's compute, more memory
    "H200 NVL": _tensor_core(60, 417.5, 835.5),
    "A100": _tensor_core(19.5, 156, 312),
    "A10": _tensor_core(31.2, 62.5, 125),
    "L4": _tensor_core(30.3, 60, 121),
    "L40": _tensor_core(90.5, 90.5, 181),
    "L40S": _tensor_core(91.6, 183, 362),
    "RTX 4090": _tensor_core(82.6, 82.6, 165.2),
    "RTX 3090": _tensor_core(35.6, 35.6, 71),
    "V100 SXM2": {"fp32": 15.7 * _T, "fp16": 125 * _T},
    "V100 PCIe": {"fp32": 14 * _T, "fp16": 112 * _T},
    "V100S PCIe": {"fp32": 16.4 * _T, "fp16": 130 * _T},
    "T4": {"fp32": 8.1 * _T, "fp16": 65 * _T},
}
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

# How CUDA spells each model (torch.cuda.get_device_name), as whole-name patterns after the
# vendor prefix is dropped: "NVIDIA H100 80GB HBM3" is the SXM part, "NVIDIA A10G" is not an A10,
# "NVIDIA L40" is not an L4.
_MODEL_PATTERNS: tuple[tuple[str, str], ...] = (
    ("H100 PCIe", r"H100 PCIE( \d+GB)?"),
    ("H100 NVL", r"H100 NVL( \d+GB)?"),
    ("H100 SXM", r"H100( SXM5?)?( \d+GB)?( HBM3)?"),
    ("H200 NVL", r"H200 NVL( \d+GB)?"),
    ("H200 SXM", r"H200( SXM)?( \d+GB)?( HBM3E)?"),
    ("A100", r"A100([- ](SXM4|PCIE))?([- ]\d+GB)?( PCIE)?"),
    ("A10", r"A10"),
    ("L4", r"L4"),
    ("L40", r"L40"),
    ("L40S", r"L40S"),
    ("RTX 4090", r"(GEFORCE )?RTX 4090"),
    ("RTX 3090", r"(GEFORCE )?RTX 3090"),
    ("V100 SXM2", r"V100-SXM2-\d+GB"),
    ("V100 PCIe", r"V100-PCIE-\d+GB"),
    ("V100S PCIe", r"V100S-PCIE-\d+GB"),
    ("T4", r"T4"),
)


def gpu_model(name: str) -> str | None:
    """The ``PEAK_FLOPS`` key of a CUDA device name, matched exactly (None when not listed)."""
    bare = " ".join(name.upper().split())
    for _ in range(2):  # "NVIDIA Tesla T4", "Tesla V100-...", "NVIDIA H100 ..."
        bare = re.sub(r"^(NVIDIA|TESLA)\s+", "", bare)
    for model, pattern in _MODEL_PATTERNS:
        if re.fullmatch(pattern, bare):
            return model
    return None


def sync(device: torch.device | str | None = None) -> None:
    """Wait until queued work on ``device`` finishes (no-op on CPU)."""
    dev = torch.device(device) if device is not None else None
    if dev is None or dev.type == "cuda":
        if torch.cuda.is_available():
            torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one intra-op thread, restored after: small CPU timings hold steadier than
    with a thread pool that wakes for every tiny op."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (the platform's word where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device | str = "cpu") -> str:
    """A human-readable device name to print next to every figure: a GPU's name, or a CPU's model, the
    ISA that matters ([AMX], [AVX512-BF16], [AVX2], ...: :func:`effkit.amp.cpu_isa`) and its threads."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev.index or 0)
    if dev.type == "cpu":
        model = cpu_model()
        threads = torch.get_num_threads()
        # the ISA beside the model: "AMD EPYC" named an AVX512-BF16 host and two AVX2-only ones
        return f"CPU {model} [{cpu_isa()}] ({threads} thread{'' if threads == 1 else 's'})"
    return dev.type


def peak_flops(name: str, precision: str = "bf16", device_type: str = "cuda") -> float | None:
    """Dense peak FLOP/s of the GPU called ``name`` in ``precision`` ("fp32", "tf32", "bf16",
    "fp16"), or None: unknown model, a precision it lacks, or any non-CUDA device (a CPU named
    "AMD A10-7850K" is not an A10). Divide by the peak of the precision the run used."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {PRECISIONS}")
    if device_type != "cuda":
        return None
    model = gpu_model(name)
    return PEAK_FLOPS[model].get(precision) if model else None


def run_precision(
    policy_mode: str,
    device_type: str = "cuda",
    ops: str = "matmul",
    capability: tuple[int, int] | None = None,
) -> str:
    """The precision whose peak an MFU must use, from an AMP policy mode ("bf16", "fp16", "off")
    and what dominates the FLOPs: ``ops="matmul"`` (transformers) or ``"conv"`` (CNNs). On CUDA an
    "fp32" run is TF32 on tensor cores where PyTorch allows it: convolutions by default
    (``torch.backends.cudnn.allow_tf32`` is True), matmuls only when asked for
    (``torch.set_float32_matmul_precision("high")``), and only on GPUs that have TF32 (compute
    capability 8.0, Ampere, or newer): a V100 or T4 runs fp32 whatever the flags say. ``capability``
    is the current GPU's unless given (unknown without CUDA: the flags alone decide)."""
    if ops not in ("matmul", "conv"):
        raise ValueError(f"ops must be 'matmul' or 'conv', not {ops!r}")
    if policy_mode in ("bf16", "fp16"):
        return policy_mode
    if capability is None and device_type == "cuda" and torch.cuda.is_available():
        capability = torch.cuda.get_device_capability()
    if device_type != "cuda" or (capability is not None and capability < (8, 0)):
        return "fp32"
    tf32 = (
        torch.backends.cudnn.allow_tf32 if ops == "conv" else torch.backends.cuda.matmul.allow_tf32
    )
    return "tf32" if tf32 else "fp32"


def mfu(flops_per_sample: float, samples_per_s: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation: achieved model FLOP/s over the device's peak (None if unknown)."""
    if not peak or flops_per_sample <= 0:
        return None
    return flops_per_sample * samples_per_s / peak


def train_flops(step: Callable[[], object]) -> int:
    """FLOPs of one call of ``step`` (forward *and* backward if it calls ``backward``)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        step()
    return int(counter.get_total_flops())


def cost_to_target(seconds: float, dollars_per_hour: float) -> float:
    """Dollars spent to reach the target at an hourly price."""
    if seconds < 0 or dollars_per_hour < 0:
        raise ValueError("seconds and dollars_per_hour must be non-negative")
    return seconds / 3600.0 * dollars_per_hour


class StepTimer:
    """Context manager timing a block with device synchronisation on entry and exit.

    >>> timer = StepTimer("cuda")
    >>> with timer:
    ...     train_step()
    >>> timer.seconds
    """

    def __init__(self, device: torch.device | str | None = "cpu"):
        self.device = device
        self.seconds = 0.0
        self.history: list[float] = []

    def __enter__(self) -> StepTimer:
        sync(self.device)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        sync(self.device)
        self.seconds = time.perf_counter() - self._t0
        self.history.append(self.seconds)


@dataclass
class ThroughputMeter:
    """Samples/s (and tokens/s) over timed steps, ignoring the first ``warmup_steps``."""

    warmup_steps: int = 2
    steps: int = 0
    samples: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def update(self, seconds: float, samples: int, tokens: int = 0) -> None:
        self.steps += 1
        if self.steps <= self.warmup_steps:
            return
        self.samples += samples
        self.tokens += tokens
        self.seconds += seconds

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


@dataclass
class TimeToTarget:
    """Records the first training time at which a metric reaches ``target``."""

    target: float
    mode: str = "max"
    seconds: float | None = None
    history: list[tuple[float, float]] = field(default_factory=list)

    def update(self, elapsed_s: float, value: float) -> bool:
        """Log (time, value); return True once the target has been reached."""
        self.history.append((elapsed_s, value))
        hit = value >= self.target if self.mode == "max" else value <= self.target
        if hit and self.seconds is None:
            self.seconds = elapsed_s
        return self.seconds is not None

    @property
    def reached(self) -> bool:
        return self.seconds is not None


class DataWaitSplit:
    """Splits loop wall time into *data wait* (inside ``next()``) and *compute* (everything else).

    A high data-wait share means the accelerator starves: fix the input pipeline first.

    >>> split = DataWaitSplit(device)
    >>> for x, y in split.wrap(loader):
    ...     step(x, y)          # compute; the device is synced before each next()
    >>> split.data_share
    """

    def __init__(self, device: torch.device | str | None = "cpu"):
        self.device = device
        self.data_s = 0.0
        self.total_s = 0.0

    def wrap(self, iterable: Iterable) -> Iterator:
        it = iter(iterable)
        sync(self.device)
        start = time.perf_counter()
        try:
            while True:
                sync(self.device)  # finish the previous step's queued work: it counts as compute
                t0 = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                self.data_s += time.perf_counter() - t0
                yield batch
        finally:  # also when the caller breaks out early (the generator is closed)
            self.total_s += time.perf_counter() - start

    @property
    def compute_s(self) -> float:
        return self.total_s - self.data_s

    @property
    def data_share(self) -> float:
        return self.data_s / self.total_s if self.total_s > 0 else float("nan")
