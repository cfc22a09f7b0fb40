"""The course site builds from the executed lessons and renders in a real (headless) browser.

It builds docs/ (Sphinx + myst-nb + sphinx-book-theme, offline) from the smoke-profile runs that
tests/test_notebooks.py already made (tests/lesson_runs.py runs each lesson once per session),
then opens the syllabus page and lesson 1 in Debian's Chromium through Playwright and checks
that the syllabus lists all thirteen lessons and that every plot loaded (naturalWidth > 0).
Screenshots land in runs/browser/. In CI (CI=true) a missing Chromium or Playwright fails.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from browser_util import find_chromium, open_in_chromium
from lesson_runs import EXECUTED, executed
from script_module import load

from effkit.syllabus import LESSONS, ready

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")
pytest.importorskip("sphinx_book_theme")

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "runs" / "browser"
IMAGES = "Array.from(document.images).map(i => ({src: i.src, ok: i.complete, w: i.naturalWidth}))"


def _docs_build():
    return load("docs/build.py")


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    in_ci = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
    reason = None
    if path is None:
        reason = "no chromium on PATH: `apt-get install -y chromium` (.ci/run does)"
    elif importlib.util.find_spec("playwright") is None:
        reason = "playwright is not installed: `pip install -e '.[dev]'`"
    if reason:
        pytest.fail(reason) if in_ci else pytest.skip(reason)
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    for lesson in ready():
        executed(lesson.slug)  # reuses test_notebooks' runs when they happened in this session
    return _docs_build().build(EXECUTED, tmp_path_factory.mktemp("site"))


@pytest.mark.slow
def test_site_has_the_syllabus_and_every_lesson(site):
    index = (site / "index.html").read_text()
    for lesson in LESSONS:
        assert lesson.title.split(":")[0] in index, f"syllabus lacks {lesson.title!r}"
    assert index.count("planned") == sum(lesson.status == "planned" for lesson in LESSONS)
    for lesson in ready():
        page = site / "lessons" / f"{lesson.slug}.html"
        assert page.is_file(), f"{page} was not built"
        assert "Summary" in page.read_text(), f"{page}: executed outputs missing"


@pytest.mark.slow
def test_site_renders_index_and_a_lesson_with_its_plots(site, chromium):
    index = open_in_chromium(
        (site / "index.html").as_uri(),
        chromium,
        wait_for=["table"],
        collect=["table tbody tr", "h1"],
        screenshot=SHOTS / "site-index.png",
    )
    assert index.timed_out_on is None, f"index: {index.timed_out_on} never appeared"
    assert len(index.found["table tbody tr"]) == len(LESSONS), index.found["table tbody tr"]
    assert not index.page_errors, index.page_errors

    first = ready()[0]
    page = open_in_chromium(
        (site / "lessons" / f"{first.slug}.html").as_uri(),
        chromium,
        wait_for=["article h1", "article img"],
        collect=["article h1"],
        screenshot=SHOTS / "site-lesson1.png",
        evaluate=IMAGES,
    )
    assert page.timed_out_on is None, f"lesson: {page.timed_out_on} never appeared"
    assert first.title in " ".join(page.found["article h1"])
    plots = [img for img in page.evaluated if "/_images/" in img["src"]]
    assert len(plots) >= 2, f"expected the lesson's plots as images, got {page.evaluated}"
    broken = [img["src"] for img in plots if not (img["ok"] and img["w"] > 0)]
    assert not broken, f"plots that did not render: {broken}"
