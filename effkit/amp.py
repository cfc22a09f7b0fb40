"""Automatic mixed precision (AMP): one policy, one autocast context, a scaler only for fp16.

`choose_precision` picks what the device runs natively: bf16 on Ampere+ GPUs and CPUs with AMX or
AVX512-BF16, fp16 with a ``GradScaler`` on older GPUs, fp32 elsewhere (``"off"``: an fp32 baseline).
On a CPU bf16 can be slower than fp32: measure (:mod:`effkit.precision_probe`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MODES = ("auto", "bf16", "fp16", "off")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}


CPUINFO_PATH = "/proc/cpuinfo"


def cpu_native_bf16(cpuinfo: str | None = None) -> bool:
    """True when this CPU multiplies bf16 in hardware: AMX tiles or AVX512-BF16.

    Reads the kernel's CPU flags (``amx_bf16``, ``avx512_bf16``) from ``/proc/cpuinfo`` (or the
    text given), and falls back to torch's own probes where there is no such file (macOS).
    Without those units bf16 autocast is emulated and slower than fp32.
    """
    if cpuinfo is None:
        try:
            with open(CPUINFO_PATH) as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = None
    if cpuinfo is not None:
        flags = set()
        for line in cpuinfo.splitlines():
            if line.startswith(("flags", "Features")):
                flags.update(line.split(":", 1)[-1].split())
        return bool(flags & {"amx_bf16", "avx512_bf16"})
    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")  # private, hence getattr
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def cpu_features(cpuinfo: str | None = None) -> dict:
    """What this CPU offers for training, to print and record beside every CPU figure.

    ``torch_capability``: the widest vector ISA torch's own kernels dispatch to
    (``torch.backends.cpu.get_cpu_capability()``: "DEFAULT", "AVX2", "AVX512", ...); ``flags``:
    the bf16-relevant kernel flags present (``amx_bf16``, ``avx512_bf16``, ``avx512f``, ``avx2``);
    ``native_bf16``: :func:`cpu_native_bf16`. A cloud VM can move to a host with other features
    under the same model name, so a result names its CPU's features, not just its model.
    """
    if cpuinfo is None:
        try:
            with open(CPUINFO_PATH) as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    present: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith(("flags", "Features")):
            present.update(line.split(":", 1)[-1].split())
    wanted = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")
    capability = getattr(
        getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "unknown"
    )()
    return {
        "torch_capability": capability,
        "flags": [f for f in wanted if f in present],
        "native_bf16": cpu_native_bf16(cpuinfo or None),
    }


def cpu_isa(features: dict | None = None) -> str:
    """The instruction set that decides this CPU's training speed and numerics, as one word for a device
    name: "AMX", "AVX512-BF16", "AVX512", "AVX2" or torch's own capability where there are no flags. Three
    2-core hosts called "AMD EPYC" ran the course (AVX512-BF16, and two AVX2-only generations): the model
    name alone let one host's calibration stand for another's."""
    f = features or cpu_features()
    for flag, word in (
        ("amx_bf16", "AMX"),
        ("avx512_bf16", "AVX512-BF16"),
        ("avx512f", "AVX512"),
        ("avx2", "AVX2"),
    ):
        if flag in f["flags"]:
            return word
    return str(f["torch_capability"])


def describe_cpu(features: dict | None = None) -> str:
    """One line for a figure's caption, e.g. "AVX512 kernels; avx512_bf16: native bf16"."""
    f = features or cpu_features()
    bf16 = [x for x in f["flags"] if x.endswith("bf16")]
    return f"{f['torch_capability']} kernels; " + (
        f"{', '.join(bf16)}: native bf16"
        if f["native_bf16"]
        else "no AMX / AVX512-BF16: bf16 emulated"
    )


def cuda_native_bf16(capability: tuple[int, int]) -> bool:
    """bf16 tensor cores exist from compute capability 8.0 (Ampere) on.

    ``torch.cuda.is_bf16_supported()`` also answers True on a T4 (7.5) or V100 (7.0), where bf16
    is emulated through fp32 and slower than fp16: never use it to choose a precision.
    """
    return tuple(capability) >= (8, 0)


@dataclass(frozen=True)
class DeviceCaps:
    """What a device can do; build one by hand to simulate hardware you don't have."""

    type: str  # "cuda", "cpu", "mps"
    name: str = ""
    bf16: bool = False
    fp16: bool = False

    @classmethod
    def detect(cls, device: torch.device | str) -> DeviceCaps:
        device = torch.device(device)
        if device.type == "cuda":
            idx = device.index if device.index is not None else torch.cuda.current_device()
            return cls(
                "cuda",
                torch.cuda.get_device_name(idx),
                bf16=cuda_native_bf16(torch.cuda.get_device_capability(idx)),
                fp16=True,
            )
        if device.type == "cpu":
            # Native bf16 only (AMX / AVX512-BF16); fp16 training on CPU has no GradScaler path.
            return cls("cpu", "cpu", bf16=cpu_native_bf16(), fp16=False)
        if device.type == "mps":
            return cls("mps", "mps", bf16=False, fp16=True)
        return cls(device.type, device.type)


@dataclass(frozen=True)
class AmpPolicy:
    """The chosen precision for one device. ``mode`` is "bf16", "fp16" or "off"."""

    device_type: str
    mode: str

    @property
    def dtype(self) -> torch.dtype | None:
        return _DTYPES[self.mode]

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    @property
    def needs_scaler(self) -> bool:
        return self.mode == "fp16"

    def autocast(self) -> torch.autocast:
        """The single autocast context to wrap forward + loss in (not backward)."""
        if not self.enabled:
            return torch.autocast(self.device_type, enabled=False)
        return torch.autocast(self.device_type, dtype=self.dtype)

    def make_scaler(self) -> torch.amp.GradScaler:
        """A GradScaler that is a no-op unless the policy is fp16."""
        return torch.amp.GradScaler(self.device_type, enabled=self.needs_scaler)


def choose_precision(
    device: torch.device | str, requested: str = "auto", caps: DeviceCaps | None = None
) -> AmpPolicy:
    """Resolve ``requested`` ("auto", "bf16", "fp16", "off") into a policy for ``device``.

    Raises ``ValueError`` when the request cannot run there (fp16 on a CPU, bf16 on a T4), rather
    than silently training in another precision.
    """
    if requested not in MODES:
        raise ValueError(f"unknown precision {requested!r}; choose one of {MODES}")
    caps = caps or DeviceCaps.detect(device)
    if requested == "off":
        return AmpPolicy(caps.type, "off")
    if requested == "auto":
        if caps.bf16:
            return AmpPolicy(caps.type, "bf16")
        if caps.fp16 and caps.type == "cuda":
            return AmpPolicy(caps.type, "fp16")
        return AmpPolicy(caps.type, "off")
    # An explicit "bf16" on a CPU without bf16 units still runs (emulated, slower: "auto" never
    # picks it there), so lessons can study it anywhere; on CUDA it must be native.
    supported = (caps.bf16 or caps.type == "cpu") if requested == "bf16" else caps.fp16
    if not supported:
        where = f"{caps.type} device {caps.name!r}".strip()
        hint = "use 'bf16' or 'off'" if requested == "fp16" else "use 'fp16' (with a GradScaler)"
        raise ValueError(f"{requested} mixed precision cannot run on the {where}; {hint}")
    return AmpPolicy(caps.type, requested)
