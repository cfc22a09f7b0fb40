"""Build the committed lesson notebooks from their jupytext sources, and tell when one is stale.

**What it does.** Each ready lesson of `effkit.syllabus` has one source, ``notebooks/<slug>.py``
in jupytext's percent format (``# %%`` code cells, ``# %% [markdown]`` text cells, cell metadata
such as ``tags=["summary"]`` in the header). ``python -m effkit.lesson build`` converts each to
``notebooks/<slug>.ipynb`` with jupytext, without outputs or execution counts and with stable
cell ids, so an unchanged source gives a byte-identical notebook; ``--check`` only reports the
notebooks that differ from their source (the test suite runs it).

**When to use it.** After editing a lesson source: ``make notebooks``, and commit both files.

**Pitfalls.** Never edit a lesson's ``.ipynb`` by hand: the next build overwrites it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from effkit.syllabus import LESSONS, ready

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def source_path(slug: str) -> Path:
    return NOTEBOOKS / f"{slug}.py"


def render(slug: str) -> str:
    """The clean .ipynb text jupytext makes from ``notebooks/<slug>.py``."""
    import jupytext
    import nbformat

    nb = jupytext.read(source_path(slug), fmt="py:percent")
    nb.metadata = {"kernelspec": KERNEL, "language_info": {"name": "python"}}
    for i, cell in enumerate(nb.cells):
        cell.id = f"{slug[:2]}-{i:02d}"  # stable: no churn on regeneration
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.nbformat, nb.nbformat_minor = 4, 5
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def syllabus_table(link: Callable[[str], str] | None = None) -> str:
    """The thirteen lessons and their status as a markdown table, from `effkit.syllabus`.

    ``link(slug)`` gives a ready lesson's link target (default: its notebook file)."""
    link = link or (lambda slug: f"{slug}.ipynb")
    rows = ["| # | lesson | status | exercise |", "| --- | --- | --- | --- |"]
    for lesson in LESSONS:
        title = (
            f"[{lesson.title}]({link(lesson.slug)})" if lesson.status == "ready" else (lesson.title)
        )
        exercise = f"`exercises/{lesson.assignment}/`" if lesson.status == "ready" else "—"
        rows.append(f"| {lesson.number} | {title} | {lesson.status} | {exercise} |")
    return "\n".join(rows)


README_HEAD = """# notebooks/ — the lessons

One lesson per step of the efficiency playbook. Each states its goal and its measured run time
per profile, measures before and after with effkit, draws its plots, has the learner predict
before measuring and try something in *Your turn*, cites its sources, and ends with a summary
computed from its own measurements. Open them with `make lab`; the course site (`make site`)
shows them with their outputs.

**Profiles:** `EFFKIT_PROFILE=cpu` (the default without a GPU: real effects in minutes),
`gpu` (the default with CUDA), `smoke` (tiny, synthetic: for the test suite only).

**Authoring:** each lesson's one source is `notebooks/<slug>.py` (jupytext percent format:
`# %%` code cells, `# %% [markdown]` text, `# %% tags=["summary"]`). After editing, run
`make notebooks` (`python -m effkit.lesson build`) and commit the `.py` with the generated
`.ipynb`; a test fails when they differ. This page is generated from `effkit/syllabus.py` too.

## Syllabus

"""


def readme() -> str:
    return README_HEAD + syllabus_table() + "\n"


def stale() -> list[str]:
    """Files (relative to the repo) that differ from what their source builds to."""
    out = []
    for lesson in ready():
        path = NOTEBOOKS / lesson.notebook
        if not path.exists() or path.read_text() != render(lesson.slug):
            out.append(f"notebooks/{lesson.notebook}")
    if not (NOTEBOOKS / "README.md").exists() or (NOTEBOOKS / "README.md").read_text() != readme():
        out.append("notebooks/README.md")
    return out


def execute(slug: str, out_dir: Path, timeout_s: int = 1800) -> tuple[Path, float]:
    """Run the notebook of ``notebooks/<slug>.py`` top to bottom from ``notebooks/`` (as Jupyter
    would) and write the executed copy to ``out_dir``; returns (its path, wall seconds). The profile
    is the caller's ``EFFKIT_PROFILE``. The notebook is rendered from the source here, not read
    from the built ``.ipynb``: a recording keyed by the source's hash once ran a stale build."""
    import nbclient
    import nbformat

    nb = nbformat.reads(render(slug), as_version=4)
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=timeout_s,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the traceback, when a cell fails
    wall_s = time.perf_counter() - start
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{slug}.ipynb"
    nbformat.write(nb, path)
    return path, wall_s


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m effkit.lesson", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("command", choices=["build", "run"])
    parser.add_argument("--check", action="store_true", help="build: only report stale notebooks")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "runs" / "executed",
        help="run: where the executed notebooks go",
    )
    parser.add_argument("slugs", nargs="*", help="run: lessons to run (default: all ready ones)")
    args = parser.parse_intermixed_args(
        argv
    )  # `run --out DIR SLUG` as well as `run SLUG --out DIR`
    if args.command == "run":
        known = [lesson.slug for lesson in ready()]
        unknown = [s for s in args.slugs if s not in known]
        if unknown:
            parser.error(f"unknown lesson(s) {unknown}; ready lessons: {known}")
        profile = os.environ.get("EFFKIT_PROFILE", "(unset: cpu, or gpu with CUDA)")
        for slug in args.slugs or [lesson.slug for lesson in ready()]:
            path, wall_s = execute(slug, args.out)
            print(f"{slug}: {wall_s:.1f} s wall time, EFFKIT_PROFILE={profile} -> {path}")
        return
    if args.check:
        bad = stale()
        for path in bad:
            print(f"stale: {path} (run `make notebooks`)")
        sys.exit(1 if bad else 0)
    for lesson in ready():
        (NOTEBOOKS / lesson.notebook).write_text(render(lesson.slug))
        print(f"wrote notebooks/{lesson.notebook} from notebooks/{lesson.slug}.py")
    (NOTEBOOKS / "README.md").write_text(readme())
    print("wrote notebooks/README.md from effkit/syllabus.py")
