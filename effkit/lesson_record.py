"""Recorded lesson runs: the executed ``cpu`` notebooks the course site shows, with how they ran.

``python -m effkit.lesson record [slug ...]`` runs lessons one at a time in the ``cpu`` profile and
keeps each run's outputs in ``docs/recorded/<slug>.outputs.json`` (data, keyed by each code
cell's source: the committed notebooks stay clean, and the site puts the outputs back into them)
with a manifest line: the source's hash (so a page
built from an older source says so), the device, the wall time and the load average around it
(a run time is quoted from a quiet machine only), the date and the versions. Readers then see
results without running minutes of code; the site (`make site`) uses these records.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import sys
from pathlib import Path

from effkit import lesson_build
from effkit.lesson_build import ROOT, execute, source_path
from effkit.measure import device_name

RECORDED = ROOT / "docs" / "recorded"
MANIFEST = "manifest.json"
QUIET_LOAD = 1.0  # 1-minute load average per core above which a recorded run time is "under load"


def source_hash(slug: str) -> str:
    """The source's hash without its **Run time** paragraph, which quotes the recording: stating a
    freshly recorded run time must not make that recording stale."""
    lines, keep, skipping = source_path(slug).read_text().splitlines(), [], False
    for line in lines:
        skipping = line.startswith("# **Run time**") or (skipping and line.strip() not in ("#", ""))
        if not skipping:
            keep.append(line)
    return hashlib.sha256("\n".join(keep).encode()).hexdigest()


def manifest(folder: Path | None = None) -> dict:
    folder = RECORDED if folder is None else folder  # looked up per call: tests swap it
    path = folder / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}


def state(slug: str, folder: Path | None = None) -> str:
    """The record's state: "current", "stale" (the source changed since) or "missing"."""
    folder = RECORDED if folder is None else folder  # looked up per call: tests swap it
    entry = manifest(folder).get(slug)
    if entry is None or not (folder / f"{slug}.outputs.json").is_file():
        return "missing"
    return "current" if entry["source_sha256"] == source_hash(slug) else "stale"


def _load_per_core() -> float:
    return os.getloadavg()[0] / max(1, len(os.sched_getaffinity(0)))


def record(slug: str, folder: Path | None = None, profile: str = "cpu", run=execute) -> dict:
    """Run one lesson in ``profile`` into ``folder`` and add its manifest entry (returned)."""
    folder = RECORDED if folder is None else folder  # looked up per call: tests swap it
    import torch

    saved = os.environ.get("EFFKIT_PROFILE")
    os.environ["EFFKIT_PROFILE"] = profile
    before = _load_per_core()
    try:
        path, wall_s = run(slug, folder)
        keep_outputs(path, folder / f"{slug}.outputs.json")
        path.unlink()
    finally:
        if saved is None:
            os.environ.pop("EFFKIT_PROFILE", None)
        else:
            os.environ["EFFKIT_PROFILE"] = saved
    after = _load_per_core()
    entry = {
        "source_sha256": source_hash(slug),
        "profile": profile,
        "device": device_name("cuda" if profile == "gpu" else "cpu"),
        "wall_s": round(wall_s, 1),
        "load_per_core": [round(before, 2), round(after, 2)],
        "quiet": max(before, after) <= QUIET_LOAD,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    entries = manifest(folder)
    entries[slug] = entry
    (folder / MANIFEST).write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
    return entry


def _cell_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def keep_outputs(executed: Path, dest: Path) -> None:
    """The executed notebook's code-cell outputs, keyed by each cell's source, as JSON data."""
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    cells = [
        {
            "key": _cell_key(c.source),
            "execution_count": c.execution_count,
            "seconds": cell_seconds(c),
            "outputs": c.outputs,
        }
        for c in nb.cells
        if c.cell_type == "code"
    ]
    dest.write_text(json.dumps({"cells": cells}, indent=None) + "\n")


def cell_seconds(cell) -> float | None:
    """A cell's run time from the timestamps nbclient writes (None where it wrote none): where a
    lesson's minutes go, so that its time budget is kept by cutting the right cell."""
    stamps = cell.get("metadata", {}).get("execution", {})
    start, end = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = datetime.datetime.fromisoformat
    return round(
        (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds(), 1
    )


def with_outputs(clean: Path, outputs: Path):
    """The clean lesson notebook with its recorded outputs put back into the cells whose source is
    unchanged since the recording (an edited cell shows none rather than another cell's)."""
    import nbformat

    nb = nbformat.read(clean, as_version=4)
    recorded = {c["key"]: c for c in json.loads(outputs.read_text())["cells"]}
    for cell in nb.cells:
        found = recorded.get(_cell_key(cell.source)) if cell.cell_type == "code" else None
        if found is not None:
            cell.outputs = [nbformat.from_dict(o) for o in found["outputs"]]
            cell.execution_count = found["execution_count"]
    return nb


def banner(slug: str, folder: Path | None = None) -> str:
    """The note a site page opens with: how its outputs were recorded, and whether they are stale."""
    folder = RECORDED if folder is None else folder  # looked up per call: tests swap it
    entry = manifest(folder)[slug]
    load = (
        "a quiet machine"
        if entry["quiet"]
        else f"a machine under load ({max(entry['load_per_core']):.1f} per core)"
    )
    text = (
        f"*Outputs recorded on {entry['device']}, profile `{entry['profile']}`, {entry['date']}: "
        f"{entry['wall_s']:.0f} s on {load} (torch {entry['torch']}).*"
    )
    if state(slug, folder) == "stale":
        text += (
            "\n\n**These outputs come from an earlier version of this lesson**: its source changed "
            "since they were recorded (`python -m effkit.lesson record " + slug + "`)."
        )
    return text


def main(argv: list[str] | None = None) -> None:
    """``python -m effkit.lesson record [slug ...]``; every other command is lesson_build's."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "record":
        return lesson_build.main(argv)
    parser = argparse.ArgumentParser(
        prog="python -m effkit.lesson record", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("slugs", nargs="*", help="lessons to record (default: all ready ones)")
    args = parser.parse_args(argv[1:])
    known = [lesson.slug for lesson in lesson_build.ready()]
    if unknown := [s for s in args.slugs if s not in known]:
        parser.error(f"unknown lesson(s) {unknown}; ready lessons: {known}")
    for slug in args.slugs or known:
        entry = record(slug)
        quiet = (
            ""
            if entry["quiet"]
            else " (NOT quiet: quote no run time from it; re-record on a quiet machine)"
        )
        print(
            f"{slug}: {entry['wall_s']:.0f} s, load per core {entry['load_per_core']}{quiet}",
            flush=True,
        )
