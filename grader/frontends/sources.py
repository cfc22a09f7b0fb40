"""Exercise sources: one jupytext percent script per assignment, rendered to nbgrader's .ipynb.

Never edit the ``.ipynb`` by hand: the next render overwrites it; a changed locked or test cell
changes nbgrader's checksum, so regenerate through nbgrader.
"""

from __future__ import annotations

from pathlib import Path

from grader.common import course

KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def source_path(assignment_id: str) -> Path:
    return course.course_root() / course.SOURCE_DIR / assignment_id / f"{assignment_id}.py"


def notebook_path(assignment_id: str) -> Path:
    return source_path(assignment_id).with_suffix(".ipynb")


def render(assignment_id: str) -> str:
    """The .ipynb text jupytext makes from the assignment's percent source."""
    import jupytext
    import nbformat

    nb = jupytext.read(source_path(assignment_id), fmt="py:percent")
    nb.metadata = {"kernelspec": KERNEL, "language_info": {"name": "python"}}
    for i, cell in enumerate(nb.cells):
        # Stable ids, no churn on regeneration: the grade id where nbgrader has one.
        cell.id = cell.metadata.get("nbgrader", {}).get("grade_id") or f"{cell.cell_type}-{i}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.nbformat, nb.nbformat_minor = 4, 5
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def assignments_with_sources() -> list[str]:
    root = course.course_root() / course.SOURCE_DIR
    return sorted(p.name for p in root.iterdir() if (p / f"{p.name}.py").is_file())


def stale(assignment_ids: list[str] | None = None) -> list[str]:
    """Assignments whose committed .ipynb is not what their source renders to."""
    ids = assignment_ids or assignments_with_sources()
    return [
        a
        for a in ids
        if not notebook_path(a).is_file() or notebook_path(a).read_text() != render(a)
    ]


def build(assignment_ids: list[str] | None = None) -> list[str]:
    """Render every (or the named) source to its .ipynb; return the ones that changed."""
    changed = stale(assignment_ids)
    for aid in changed:
        notebook_path(aid).write_text(render(aid))
    return changed
