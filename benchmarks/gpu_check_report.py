"""`make gpu-check`'s summary: each step's exit code, seconds against its plan, each grading's points
against what it must score; ``summary.json`` and a table in the results folder's README.

A grading step passes only when the grader ran (exit 0) *and* scored what the notebook deserves:
a reference solution full marks, an untouched stub 0, the no-faster submission no points in its
speed cell (and every correctness point). Rows of steps this call did not run are kept from the
earlier ``summary.json``, so a check run in parts (one call per part) ends with one summary.
"""

from __future__ import annotations

import json
from pathlib import Path

BEGIN, END = "<!-- gpu-check table: generated, do not edit -->", "<!-- end of gpu-check table -->"
EXPECTED = {
    "full": "full marks",
    "zero": "0 (untouched stub)",
    "no-speed": "correctness only: no speed points",
}


def grading_verdict(step: dict, report_path: Path) -> dict:
    """Points of a grading step's JSON report, and whether they are what the notebook deserves."""
    if not report_path.is_file():
        return {"as_expected": False, "verdict": "no report written"}
    report = json.loads(report_path.read_text())
    total, out_of = report["total"], report["max_total"]
    if step["expect"] == "full":
        ok = total == out_of
    elif step["expect"] == "zero":
        ok = total == 0
    else:  # no-speed: the performance cell scores nothing, every other cell everything
        from grader import assignments

        speed = assignments.get(step["assignment"]).performance_cell
        cells = {c["grade_id"]: c for c in report["cells"]}
        ok = (
            speed in cells
            and not cells[speed]["points"]
            and all(
                (c["points"] or 0) == c["max_points"] for gid, c in cells.items() if gid != speed
            )
        )
    return {
        "points": total,
        "max_points": out_of,
        "expect": step["expect"],
        "as_expected": ok,
        "verdict": f"{total:g} / {out_of:g} (expected {EXPECTED[step['expect']]})",
    }


def outside_declared(pyproject: Path, extras: tuple[str, ...] = ("course",)) -> list[str]:
    """Installed packages that miss what ``pyproject.toml`` declares (runtime + ``extras``): a GPU
    image's own torch, transformers or onnxruntime may be older than the course was tested with,
    and a failure there says little about the course (lesson 13's int8 export failed inside
    onnxruntime 1.30's quantizer on an H100 image; 1.32, the declared minimum, passes)."""
    import importlib.metadata

    from packaging.requirements import Requirement

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        return ["(versions not checked: this Python has no tomllib to read pyproject.toml)"]
    project = tomllib.loads(pyproject.read_text())["project"]
    declared = project["dependencies"] + [
        r for e in extras for r in project["optional-dependencies"][e]
    ]
    out = []
    for req in map(Requirement, declared):
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{req.name} missing (declared {req.specifier})")
            continue
        if not req.specifier.contains(have, prereleases=True):
            out.append(f"{req.name} {have} (declared {req.specifier})")
    return out


def summarise(out: Path, rows: list[dict], meta: dict) -> dict:
    """Merge ``rows`` into ``out/summary.json`` (earlier rows of other steps kept), write it and
    the README table; return the summary."""
    path = out / "summary.json"
    ran = {r["name"] for r in rows}
    earlier = json.loads(path.read_text()) if path.is_file() else {}
    if earlier.get("dry_run") == meta["dry_run"]:
        rows = [r for r in earlier.get("steps", []) if r["name"] not in ran] + rows
    failed = [r["name"] for r in rows if r["rc"] != 0 or r.get("as_expected") is False]
    summary = {**meta, "steps": rows, "failed": failed}
    path.write_text(json.dumps(summary, indent=2))
    write_readme_table(out / "README.md", summary)
    return summary


def table(summary: dict) -> str:
    lines = [
        f"`make gpu-check` summary on **{summary['device']}** (torch {summary['torch']}"
        + (", CPU dry run at tiny sizes" if summary["dry_run"] else "")
        + (
            f"; **outside the declared versions:** {', '.join(summary['outside_declared'])}"
            if summary.get("outside_declared")
            else ""
        )
        + f"): "
        f"{len(summary['steps']) - len(summary['failed'])}/{len(summary['steps'])} steps passed.",
        "",
        "| step | suite, part | exit | result | seconds | planned s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in summary["steps"]:
        result = r.get("verdict", "") + (
            "" if r.get("as_expected", True) else " **NOT AS EXPECTED**"
        )
        if r["rc"] == 124:
            result = f"stopped at its limit ({r.get('limit_s', '?')} s) " + result
        # rows kept from an earlier summary.json may predate suites and parts
        lines.append(
            f"| `{r['name']}` | {r.get('suite', '')} {r.get('part', '')} | {r['rc']} | "
            f"{result.strip()} | {r['seconds']:.0f} | {r.get('planned_s', '')} |"
        )
    return "\n".join(lines)


def write_readme_table(readme: Path, summary: dict) -> None:
    """Replace the generated block of the README (hand-written text around it is kept)."""
    block = f"{BEGIN}\n{table(summary)}\n{END}"
    text = (
        readme.read_text() if readme.is_file() else f"# `make gpu-check` on {summary['device']}\n\n"
    )
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    readme.write_text(text)
