"""Hardware-aware speedup targets: what "fast enough" means depends on the machine.

**What it does.** Maps a device name to a device class (``cpu``, ``h100`` for H100/H200, ``a100``,
``l4``, ``t4``, ``gpu`` for any other GPU) and looks up the assignment's speedup ``target`` (full
points at or above it) and ``floor`` (no points at or below it; linear in between). Instructors
override any entry in ``course/grader_targets.json`` (or the file named by
``$EFFKIT_GRADER_TARGETS``)::

    {"lesson2": {"cpu": {"target": 1.5}, "a100": {"target": 4.0, "floor": 1.5}}}

**When to use it.** Every performance grade; the report names the device and the target used.

**Expected gain.** Fair targets: an input pipeline that is 6x faster on an H100 may be only 1.4x
faster on a 2-core CPU, where the model itself is the bottleneck.

**Pitfalls.** CPU targets were measured on the course's 2-core reference machine; GPU targets are
estimates until an instructor measures their hardware (``python -m grader calibrate``) and
overrides them. Names are matched as whole words ("L4" must not match "L40S").
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.course import course_dir

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


def overrides_path() -> Path:
    env = os.environ.get("EFFKIT_GRADER_TARGETS")
    return Path(env).expanduser() if env else course_dir() / "grader_targets.json"


def load_overrides(path: Path | None = None) -> tuple[dict, str]:
    path = path or overrides_path()
    if not path.is_file():
        return {}, "default"
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"target overrides {path} are not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"target overrides {path} must be a JSON object of assignment -> class")
    return data, str(path)


_SNAPSHOTS: dict[str, tuple[dict, str]] = {}


def snapshot_overrides() -> tuple[dict, str]:
    """The instructor's overrides as they were the first time this process asked: taken by
    :func:`grader.sandbox.launch` before any learner code starts, so nothing a learner process
    writes later (where no sandbox hides the course folder) can change this grading's targets."""
    key = str(overrides_path())
    if key not in _SNAPSHOTS:
        _SNAPSHOTS[key] = load_overrides(Path(key))
    return _SNAPSHOTS[key]


def default_targets(assignment: str) -> dict[str, dict[str, float]]:
    """The assignment's own table (``Assignment.targets``, in its package), by device class."""
    from grader import assignments

    table = assignments.get(assignment).targets
    if not table:
        raise ValueError(f"assignment {assignment!r} has no speedup targets (it is not graded on speed)")
    return table


def table_for(assignment: str, device_name: str) -> str:
    """The row of ``assignment``'s tables for this device: its class, or ``cpu-fp32`` on a CPU
    without native bf16 when the assignment has such a row. Targets and the accuracy gate's
    calibration are both keyed by it (:func:`grader.perf.load_gate`)."""
    cls = device_class(device_name)
    if cls == "cpu" and NO_NATIVE_BF16 in default_targets(assignment):
        from effkit.amp import cpu_native_bf16  # the grader times on this machine's CPU

        return "cpu" if cpu_native_bf16() else NO_NATIVE_BF16
    return cls


def target_for(assignment: str, device_name: str, overrides_file: Path | None = None) -> Target:
    """The target for ``assignment`` on ``device_name``, instructor overrides applied."""
    defaults = default_targets(assignment)
    cls = device_class(device_name)
    table = table_for(assignment, device_name)
    entry = dict(defaults[table])
    overrides, source = load_overrides(overrides_file) if overrides_file else snapshot_overrides()
    custom = overrides.get(assignment, {}).get(table, {})
    unknown = set(custom) - {"target", "floor"}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} in target overrides {source}; use target, floor")
    entry.update({k: float(v) for k, v in custom.items()})
    if not 0 < entry["floor"] < entry["target"]:
        raise ValueError(
            f"target overrides for {assignment}/{table} need 0 < floor < target, got {entry} ({source})"
        )
    return Target(assignment, device_name, cls, entry["target"], entry["floor"],
                  source if custom else "default", table)
