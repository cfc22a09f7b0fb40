"""Lesson 14's calibration campaign: whole gradings, repeated, to set the speed tiers per host.

Grades each submission ``--repeats`` times through ``python -m grader check`` (the learner's path:
sandboxed workers, the grader's clock) and writes every grading's time-to-target speed-up, its
interval, the ablations' shares and the load around it to ``--out``. A tier is kept for a host when
the reference clears it in every grading and a recipe without the main change never does; run it on
a quiet host (nothing else running) for the figures a tier is set from, and label any other run.

    python grader/assignments/lesson14/calibration/campaign.py solutions/lesson14/lesson14.ipynb \
        --repeats 5 --out benchmarks/results/lesson14-campaign-epyc.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from effkit.measure import device_name


def grade_once(notebook: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        load = os.getloadavg()
        subprocess.run(
            [sys.executable, "-m", "grader", "check", str(notebook), "--json", str(out)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        perf = json.loads(out.read_text())["performance"] or {}
    return {
        "load_before": load,
        "load_after": os.getloadavg(),
        "points": perf.get("points"),
        "speed": perf.get("speed"),
        "attribution": perf.get("attribution"),
        "times_to_target_s": perf.get("times_to_target_s"),
        "problems": perf.get("problems"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    result = {"host": device_name(torch.device("cpu")), "gradings": {}}
    for nb in args.notebooks:
        runs = result["gradings"].setdefault(str(nb), [])
        for i in range(args.repeats):
            runs.append(grade_once(nb))
            speed = runs[-1]["speed"] or {}
            print(
                f"{nb} {i + 1}/{args.repeats}: {speed.get('median')} {runs[-1]['points']}",
                flush=True,
            )
            args.out.write_text(json.dumps(result, indent=1))  # kept as it goes: a long campaign


if __name__ == "__main__":
    main()
