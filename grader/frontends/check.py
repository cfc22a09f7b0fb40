"""``python -m grader check NOTEBOOK``: the learner's own run of exactly what autograding does.

Without ``solutions/`` (a course that keeps it private) the released notebook is the source:
hidden tests are then skipped and the report says so. ``--json OUT`` writes the report.
"""

from __future__ import annotations

from pathlib import Path

from grader.common import course
from grader.frontends import pipeline
from grader.frontends.notebook import NotebookError
from grader.scoring.perf import GradingError


def check(
    path: str | Path,
    *,
    assignment_id: str | None = None,
    json_out: str | None = None,
    spec_name: str | None = None,
    device: str | None = None,
) -> int:
    try:
        sub = pipeline.load(path, assignment_id)
    except (NotebookError, ValueError) as err:
        print(f"grader check: {err}")
        return 2
    print(
        f"grader check: {sub.path} (assignment {sub.assignment.id}); grading out of the kernel ...",
        flush=True,
    )
    try:
        report = pipeline.grade(sub, spec_name, device)
    except GradingError as err:
        print(f"grader check: the grader could not run: {err}")
        return 2
    print(pipeline.render(report))
    if json_out:
        course.write_report(json_out, report.to_json())
    return 0
