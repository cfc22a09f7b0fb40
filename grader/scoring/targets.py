"""Hardware-aware speedup targets: full points at ``target``, none at ``floor``, linear between.

A device name maps to a class (``cpu``, ``h100`` for H100/H200, ``a100``, ``l4``, ``t4``, else
``gpu``); each assignment declares its table per class, and instructors override entries in
``course/grader_targets.json`` ({"lesson2": {"cpu": {"target": 1.5}}}). Names match as whole words
("L4" must not match "L40S").
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from effkit.amp import cpu_native_bf16
from grader.common.overrides import load_overrides, snapshot_overrides

DEVICE_CLASSES = ("cpu", "h100", "a100", "l4", "t4", "gpu")

# (class, regex on the device name), first match wins.
_GPU_PATTERNS = (
    ("h100", r"\bH(100|200)\b"),
    ("a100", r"\bA100\b"),
    ("l4", r"\bL4\b"),
    ("t4", r"\bT4\b"),
)


# Assignments whose gain depends on native 16-bit units look up "cpu-fp32" on CPUs without them.
NO_NATIVE_BF16 = "cpu-fp32"


@dataclass(frozen=True)
class Target:
    assignment: str
    device: str
    device_class: str
    target: float  # speedup for full points
    floor: float  # speedup at or below which no points are given
    source: str  # "default" or the overrides file it came from
    table: str = ""  # the row of the targets table used (device class, or "cpu-fp32")

    def credit(self, speedup: float) -> float:
        """Fraction of the performance points in [0, 1]: linear from ``floor`` to ``target``."""
        if not speedup == speedup or speedup <= self.floor:  # NaN counts as no speedup
            return 0.0
        if speedup >= self.target:
            return 1.0
        return (speedup - self.floor) / (self.target - self.floor)

    def to_dict(self) -> dict:
        return asdict(self)


def device_class(device_name: str) -> str:
    """``cpu`` for CPUs, a GPU class by name, or ``gpu`` for any other accelerator."""
    if device_name.lower().startswith("cpu"):
        return "cpu"
    for cls, pattern in _GPU_PATTERNS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return cls
    return "gpu"


def default_targets(assignment) -> dict[str, dict[str, float]]:
    """The assignment's own table (``Assignment.targets``, in its package), by device class."""
    if not assignment.targets:
        raise ValueError(
            f"assignment {assignment.id!r} has no speedup targets (it is not graded on speed)"
        )
    return assignment.targets


def table_for(assignment, device_name: str) -> str:
    """The row of ``assignment``'s tables for this device: its class, or ``cpu-fp32`` on a CPU
    without native bf16 when the assignment has such a row. Targets and the accuracy gate's
    calibration are both keyed by it (:func:`grader.scoring.perf.load_gate`)."""
    cls = device_class(device_name)
    try:
        rows = default_targets(assignment)
    except ValueError:  # no speed-up targets (lesson 14 scores time to target): keyed by class
        return cls
    if cls == "cpu" and NO_NATIVE_BF16 in rows:
        return (
            "cpu" if cpu_native_bf16() else NO_NATIVE_BF16
        )  # this machine's CPU: the grader times here
    return cls


def target_for(assignment, device_name: str, overrides_file: Path | None = None) -> Target:
    """The target for ``assignment`` (an Assignment) on ``device_name``, instructor overrides applied."""
    defaults = default_targets(assignment)
    cls = device_class(device_name)
    table = table_for(assignment, device_name)
    entry = dict(defaults[table])
    overrides, source = load_overrides(overrides_file) if overrides_file else snapshot_overrides()
    custom = overrides.get(assignment.id, {}).get(table, {})
    unknown = set(custom) - {"target", "floor"}
    if unknown:
        raise ValueError(
            f"unknown keys {sorted(unknown)} in target overrides {source}; use target, floor"
        )
    entry.update({k: float(v) for k, v in custom.items()})
    if not 0 < entry["floor"] < entry["target"]:
        raise ValueError(
            f"target overrides for {assignment.id}/{table} need 0 < floor < target, got {entry} ({source})"
        )
    return Target(
        assignment.id,
        device_name,
        cls,
        entry["target"],
        entry["floor"],
        source if custom else "default",
        table,
    )
