"""The grading farm on this machine: N correctness-only gradings on 2 slots vs 1, and timed gradings
on 2 slots checked for overlap on a slot, from the reports' own timestamps and cores.

    python benchmarks/farm_slots.py --untimed 24 --timed 6 --out benchmarks/results/farm-slots-<cpu>.json

Each farm run gets a fresh temporary course (no ledger: everything is graded), lesson 1's reference
solution for the correctness-only runs and lesson 2's for the timed one, all through
``python -m grader farm`` on a private local Ray. Prints one summary and writes the raw summaries.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln), "")
    return f"{name or platform.processor()} ({os.cpu_count()} CPUs)"


def course(root: Path, lesson: str, n: int) -> dict:
    env = dict(os.environ, EFFKIT_COURSE_ROOT=str(root))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    shutil.copytree(ROOT / "solutions", root / "solutions")
    subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", lesson, "--force"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    for i in range(n):
        folder = root / "course" / "submitted" / f"s{i:03d}" / lesson
        folder.mkdir(parents=True)
        shutil.copy(ROOT / "solutions" / lesson / f"{lesson}.ipynb", folder)
    return env


def farm(lesson: str, n: int, slots: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="effkit-farm-bench-") as tmp:
        env = course(Path(tmp), lesson, n)
        out = Path(tmp) / "run.json"
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "grader", "farm", lesson, "--slots", str(slots)]
            + ["--no-progress", "--json", str(out)],
            cwd=ROOT,
            env=env,
            check=False,
        )
        summary = json.loads(out.read_text())
        summary |= {"slots": slots, "command_s": time.perf_counter() - t0, "load_before": load}
        summary["load_after"] = os.getloadavg()[0]
        return summary


def overlaps(summary: dict) -> list[str]:
    """Pairs of gradings that ran at the same time on the same slot or on shared cores."""
    bad = []
    rows = [r for r in summary["gradings"] if r.get("started_at") is not None]
    for a, b in itertools.combinations(rows, 2):
        same_place = a["host"] == b["host"] and (
            a["slot"] == b["slot"] or set(a["cores"]) & set(b["cores"])
        )
        at_once = a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]
        if same_place and at_once:
            bad.append(f"{a['student']} and {b['student']} on slot {a['slot']}/{b['slot']}")
    return bad


def concurrent_pairs(summary: dict) -> int:
    rows = [r for r in summary["gradings"] if r.get("started_at") is not None]
    return sum(
        a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]
        for a, b in itertools.combinations(rows, 2)
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--untimed", type=int, default=24, help="lesson 1 gradings per run (0: skip)")
    p.add_argument("--timed", type=int, default=6, help="lesson 2 gradings on 2 slots (0: skip)")
    p.add_argument("--out", help="write every run's summary here")
    args = p.parse_args()
    result = {"device": cpu_model(), "python": sys.version.split()[0]}
    if args.untimed:
        two = farm("lesson1", args.untimed, 2)
        one = farm("lesson1", args.untimed, 1)
        result |= {"untimed_2_slots": two, "untimed_1_slot": one}
        result["speedup_2_vs_1"] = one["wall_s"] / two["wall_s"]
        print(
            f"{args.untimed} lesson1 gradings: 1 slot {one['wall_s']:.0f} s, 2 slots "
            f"{two['wall_s']:.0f} s: {result['speedup_2_vs_1']:.2f}x; median grading "
            f"{one['grading_s_median']:.1f} s (1 slot) vs {two['grading_s_median']:.1f} s (2 slots); "
            f"failed {one['failed']} / {two['failed']}"
        )
    if args.timed:
        timed = farm("lesson2", args.timed, 2)
        result |= {"timed_2_slots": timed, "timed_overlaps": overlaps(timed)}
        result["timed_concurrent_pairs"] = concurrent_pairs(timed)
        print(
            f"{args.timed} lesson2 timed gradings on 2 slots: wall {timed['wall_s']:.0f} s, "
            f"{result['timed_concurrent_pairs']} pairs ran at the same time, overlaps on one slot: "
            f"{result['timed_overlaps'] or 'none'}; failed {timed['failed']}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
