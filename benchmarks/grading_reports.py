"""The grader's safety net for a refactor: every reference's and stub's report, recorded and compared.

Issue 40 moves the grader's code without changing what it does. Before moving anything, record what
``python -m grader check`` says of every assignment's reference solution and untouched exercise; after,
record again and compare cell for cell. Measured figures (speed-ups, milliseconds, accuracies) move
run to run, so a report is reduced to what must not: each cell's points and maximum, its verdict and
its reason with every number replaced by ``#``, the performance cell's problems and the flags.

    python benchmarks/grading_reports.py record before.json     # ~8 min on 2 CPU cores (26 notebooks)
    python benchmarks/grading_reports.py compare before.json after.json   # exit 1 on any difference
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NUMBER = re.compile(
    r"[-+]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?(?:x|%| ?pp| ?ms| ?s| ?µs| ?MB| ?MiB| ?KB)?"
)


def shape(text: str | None) -> str:
    """A message with its figures blanked: what a refactor must keep."""
    return NUMBER.sub("#", text or "").strip()


def essence(report: dict) -> dict:
    """What of one ``grader check --json`` report must survive a behaviour-preserving change."""
    cells = {
        r["grade_id"]: {
            "points": r["points"],
            "max": r["max_points"],
            "error": shape(r.get("error")),
        }
        for r in report.get("cells", [])
    }
    for gid, c in ((report.get("out_of_kernel") or {}).get("cells") or {}).items():
        cells.setdefault(gid, {}).update(passed=c["passed"], reason=shape(c.get("reason")))
    perf = report.get("performance") or {}
    flags = (report.get("out_of_kernel") or {}).get("flags", []) + perf.get("flags", [])
    return {
        "total": report.get("total"),
        "max_total": report.get("max_total"),
        "cells": cells,
        "problems": sorted(shape(p) for p in perf.get("problems") or []),
        "flags": sorted(shape(f) for f in flags),
    }


def record(out: Path) -> int:
    from grader.cli import demo

    with tempfile.TemporaryDirectory(prefix="grading-reports-") as tmp:
        rows = demo.grade_all(Path(tmp))
        reports = {}
        for row in rows:
            path = row.get("report")
            reports[row["name"]] = (
                essence(json.loads(Path(path).read_text())) if path else {"error": row["note"]}
            )
    out.write_text(json.dumps(reports, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"{len(reports)} reports -> {out}")
    return 0


def differences(before: dict, after: dict) -> list[str]:
    out = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a != b:
            out.append(
                f"{name}:\n  before {json.dumps(a, ensure_ascii=False)}\n  after  {json.dumps(b, ensure_ascii=False)}"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("record").add_argument("out", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "record":
        return record(args.out)
    diff = differences(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
    print("\n".join(diff) if diff else "the same reports, cell for cell (figures aside)")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
