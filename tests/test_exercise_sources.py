"""Each exercise has one text source (jupytext percent) that renders to its solution notebook."""

import nbformat
import pytest

from effkit import syllabus
from grader.frontends import sources


@pytest.mark.parametrize("aid", [lesson.assignment for lesson in syllabus.ready()])
def test_solution_notebook_is_rendered_from_its_source(aid):
    assert sources.source_path(aid).is_file(), f"solutions/{aid}/{aid}.py is missing"
    assert aid not in sources.stale([aid]), (
        f"solutions/{aid}/{aid}.ipynb is stale: run `make exercises`"
    )


def test_nbgrader_metadata_round_trips_through_the_source():
    nb = nbformat.reads(sources.render("lesson2"), as_version=4)
    graded = [
        c.metadata["nbgrader"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
    ]
    assert graded and all("points" in m and m["grade_id"] for m in graded)


def test_an_edited_source_is_reported_stale(tmp_path, monkeypatch):
    from grader.common import course

    aid = "lesson2"
    root = tmp_path / "course-root"
    (root / course.SOURCE_DIR / aid).mkdir(parents=True)
    src = sources.source_path(aid).read_text()
    (root / course.SOURCE_DIR / aid / f"{aid}.py").write_text(src)
    monkeypatch.setattr(course, "course_root", lambda: root)
    assert sources.stale([aid]) == [aid]  # no notebook yet
    assert sources.build([aid]) == [aid] and sources.stale([aid]) == []
    (root / course.SOURCE_DIR / aid / f"{aid}.py").write_text(
        src.replace("Feed the accelerator", "Feed it")
    )
    assert sources.stale([aid]) == [aid]


def test_the_release_carries_no_solution_source():
    """nbgrader copies a source folder's other files into the release: never the .py source."""
    from grader.common import course

    release = course.course_root() / course.RELEASE_DIR
    for aid in [lesson.assignment for lesson in syllabus.ready()]:
        files = sorted(p.name for p in (release / aid).iterdir())
        assert files == [f"{aid}.ipynb"], files
        assert "BEGIN SOLUTION" not in (release / aid / f"{aid}.ipynb").read_text()
