"""Lesson 1 opens in JupyterLab in a real (headless Chromium) browser, nbgrader's toolbar included.

A learner runs `make lab` and opens the lesson; this test does the same: it starts JupyterLab from
the venv on the repo root, loads /lab/tree/notebooks/01_measure_first.ipynb in Chromium, and
checks the DOM: the notebook's own markdown and code text rendered as cells, and nbgrader's
Validate button sits in the notebook toolbar (proof nbgrader's labextension loaded). It saves
runs/browser/lesson1.png so a person can look at what the browser showed.

In CI (CI=true) a missing Chromium or Playwright fails the test; elsewhere it skips with the fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser_util import find_chromium, open_in_chromium, running_jupyterlab

ROOT = Path(__file__).resolve().parents[1]
LESSON = "notebooks/01_measure_first.ipynb"
SCREENSHOT = ROOT / "runs" / "browser" / "lesson1.png"

NOTEBOOK = "#jp-main-dock-panel .jp-NotebookPanel"
CELLS = f"{NOTEBOOK} .jp-Notebook .jp-Cell"
MARKDOWN = f"{NOTEBOOK} .jp-MarkdownCell .jp-RenderedMarkdown"
# .cm-content exists only once a cell's CodeMirror editor is built (off-screen cells wait as
# placeholders), so waiting on it waits for real code on screen.
CODE = f"{NOTEBOOK} .jp-CodeCell .jp-InputArea-editor .cm-content"
# nbgrader 0.9's "validate-assignment" plugin adds ToolbarButton({className: "validate-button",
# label: "Validate"}) to every notebook's toolbar (labextensions/@jupyter/nbgrader/static/161.*.js).
VALIDATE = f"{NOTEBOOK} .jp-NotebookPanel-toolbar .validate-button"
CURRENT_TAB = "#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _missing(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"{reason} (CI=true, so this is an error, not a skip)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        _missing(
            "no chromium on PATH: install it with `apt-get install -y chromium` (.ci/run does)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing(
            "playwright is not installed: `pip install -e '.[dev]'` (never `playwright install`)"
        )
    return path


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _letters(text: str) -> str:
    """Only word characters, lowercased: markdown markup and heading anchors drop out."""
    text = re.sub(r"\]\([^)]*\)", "]", text)  # [label](url) renders as just "label"
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"\W+", "", text).lower()


def _first_line(text: str) -> str:
    return next((ln for ln in text.splitlines() if ln.strip()), "")


def _expected_text(notebook: dict) -> tuple[str, set[str]]:
    """The first markdown cell's heading (or first line), and every code cell's first line."""
    markdown = [_source(c) for c in notebook["cells"] if c["cell_type"] == "markdown"]
    code = [
        _source(c) for c in notebook["cells"] if c["cell_type"] == "code" and _source(c).strip()
    ]
    assert markdown and code, f"{LESSON} should have both markdown and code cells"
    lines = markdown[0].splitlines()
    heading = next((ln for ln in lines if ln.lstrip().startswith("#")), _first_line(markdown[0]))
    return heading, {_letters(_first_line(source)) for source in code} - {""}


def test_nbgrader_labextension_is_enabled():
    jupyter = Path(sys.executable).with_name("jupyter")
    listing = subprocess.run(
        [str(jupyter), "labextension", "list"], capture_output=True, text=True, timeout=60
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", listing.stdout + listing.stderr)  # drop colour codes
    lines = [ln for ln in text.splitlines() if "@jupyter/nbgrader" in ln]
    assert lines, f"@jupyter/nbgrader is not a JupyterLab extension here:\n{text}"
    assert "enabled" in lines[0] and "OK" in lines[0], f"nbgrader labextension: {lines[0]}"


def test_lesson1_renders_in_jupyterlab_with_validate_button(chromium):
    lesson_path = ROOT / LESSON
    assert lesson_path.is_file(), (
        f"{lesson_path} is missing: lesson 1 must exist for the browser test "
        "(write notebooks/01_measure_first.ipynb; this test fails rather than skips on purpose)"
    )
    raw = lesson_path.read_bytes()
    notebook = json.loads(raw)
    heading, code_first_lines = _expected_text(notebook)

    # Opening a notebook makes JupyterLab write a first checkpoint (gitignored); remove it again
    # when this test is what created it.
    checkpoint = lesson_path.parent / ".ipynb_checkpoints" / f"{lesson_path.stem}-checkpoint.ipynb"
    checkpoint_existed = checkpoint.exists()
    try:
        with running_jupyterlab(ROOT) as server:
            page = open_in_chromium(
                server.lab_url(LESSON),
                chromium,
                wait_for=[CELLS, MARKDOWN, CODE, VALIDATE],
                collect=[NOTEBOOK, CELLS, MARKDOWN, CODE, VALIDATE, CURRENT_TAB],
                screenshot=SCREENSHOT,
            )
            server_log = server.log_tail()
    finally:
        if not checkpoint_existed:
            checkpoint.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # only if empty: never delete others' checkpoints
                checkpoint.parent.rmdir()

    context = (
        f"\nscreenshot: {SCREENSHOT}\npage errors: {page.page_errors}\n"
        f"console errors: {page.console_errors[:10]}\nserver log tail:\n{server_log}"
    )
    assert page.timed_out_on is None, f"never appeared in the page: {page.timed_out_on}{context}"
    assert len(page.found[NOTEBOOK]) == 1, f"expected one open notebook{context}"
    assert page.found[CURRENT_TAB] == [Path(LESSON).name], f"current tab{context}"

    # JupyterLab renders cells lazily; the first screen must at least hold rendered cells, and
    # never more than the file has.
    n_cells = len(notebook["cells"])
    assert 1 <= len(page.found[CELLS]) <= n_cells, (
        f"{len(page.found[CELLS])} cells in the DOM, the file has {n_cells}{context}"
    )
    rendered_markdown = _letters(" ".join(page.found[MARKDOWN]))
    assert _letters(heading) in rendered_markdown, (
        f"markdown {heading!r} not rendered; saw {page.found[MARKDOWN][:3]}{context}"
    )
    # Which code cells are built depends on screen size and timing, so: every editor that shows
    # code shows a cell of this file, and at least one does.
    shown = [_letters(_first_line(text)) for text in page.found[CODE]]
    shown = [line for line in shown if line]
    assert shown, f"no code cell editor shows any text{context}"
    strangers = [line for line in shown if line not in code_first_lines]
    assert not strangers, f"editors show code that is not in {LESSON}: {strangers[:3]}{context}"

    assert [t.strip() for t in page.found[VALIDATE]] == ["Validate"], (
        f"nbgrader's Validate button: {page.found[VALIDATE]}{context}"
    )
    assert lesson_path.read_bytes() == raw, (
        f"opening {LESSON} in JupyterLab changed the file (sha256 "
        f"{hashlib.sha256(raw).hexdigest()[:12]} before); the test must leave the lesson alone"
    )


def test_make_lab_opens_formgrader_and_the_learners_assignment_list(chromium, tmp_path):
    """On a fresh course (no gradebook, no exchange yet) `make lab` must give the instructor a
    working formgrader (it creates the gradebook with `alembic`, from the venv's bin) and the
    learner an Assignments list (nbgrader needs the exchange folder to exist)."""
    import urllib.request

    from browser_util import chromium_page, running_make_lab

    course = tmp_path / "course"
    shots = ROOT / "runs" / "browser"
    with running_make_lab(ROOT, {"EFFKIT_COURSE_DIR": str(course)}) as server:
        api = f"{server.url}/formgrader/api/assignments?token={server.token}"
        try:
            with urllib.request.urlopen(api, timeout=60) as response:
                listed = json.loads(response.read())
        except OSError as err:  # HTTPError 500 when alembic is not found
            pytest.fail(f"{api}: {err}\nserver log:\n{server.log_tail()}")
        with chromium_page(chromium) as page:
            page.goto(f"{server.url}/formgrader?token={server.token}")
            page.get_by_text("lesson1", exact=True).first.wait_for(timeout=60_000)
            page.screenshot(path=str(shots / "make-lab-formgrader.png"))
            formgrader_text = page.inner_text("body")
            page.goto(f"{server.url}/lab?token={server.token}")
            page.wait_for_selector("#jp-main-dock-panel", timeout=60_000)
            page.get_by_text("Nbgrader", exact=True).first.click()
            page.get_by_text("Assignment List", exact=True).first.click()
            page.get_by_text("Released assignments").first.wait_for(timeout=30_000)
            page.wait_for_timeout(2_000)  # the lists fill in from the server after the headings
            page.screenshot(path=str(shots / "make-lab-assignment-list.png"))
            assignments_text = page.inner_text("#jp-main-dock-panel")
        log = server.log_tail()
    names = {a["name"] for a in listed}
    assert {"lesson1", "lesson13"} <= names, f"formgrader lists {sorted(names)}\n{log}"
    assert "lesson2" in formgrader_text, formgrader_text[:2000]
    assert "exchange directory does not exist" not in assignments_text, assignments_text
    assert "There are no assignments to fetch." in assignments_text, assignments_text
    assert (course / "exchange").is_dir() and (course / "gradebook.db").is_file()
