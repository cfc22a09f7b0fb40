"""The lesson notebooks: built from their jupytext sources, clean, and run top to bottom.

Static checks (fast): every ready lesson of effkit.syllabus has a source notebooks/<slug>.py and a
committed notebook that matches it (stale -> fail), stored without outputs; each has the shape a
lesson must have: goal, measured run times, the profile switch, two predict-then-measure cells,
a "Your turn" code cell, a summary, references and a pointer to its exercise and quiz.

Execution (slow): each lesson runs once in the smoke profile (tests/lesson_runs.py, shared with
the site test) from notebooks/ with the venv's python3 kernel. It passes when no cell errors, it
draws plots, long cells show progress bars, every predict cell reports its measurement, and the
summary prints measured numbers with the device. Each lesson's wall time is printed (-rP).
"""

from __future__ import annotations

import re
from datetime import datetime

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("jupytext")

from lesson_runs import executed  # noqa: E402

from effkit import lesson_build  # noqa: E402
from effkit.lesson import SMOKE_NOTE  # noqa: E402
from effkit.syllabus import ready  # noqa: E402

NOTEBOOKS = lesson_build.NOTEBOOKS
LESSONS = {lesson.slug: lesson for lesson in ready()}
SWITCH = "PROFILE = lesson.profile()"
LONG_CELL_S = 60  # a cell running longer than this must show a progress bar
PROGRESS = re.compile(r"\d+%\|")  # tqdm's text bar, when no widget front-end is available
GUESS = re.compile(r"^(GUESS_\w+) = None", re.M)


def _load(slug: str):
    return nbformat.read(NOTEBOOKS / f"{slug}.ipynb", as_version=4)


def _text(cell) -> str:
    """Everything a code cell printed or displayed as text."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "".join(parts)


def _has_progress_bar(cell) -> bool:
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if "application/vnd.jupyter.widget-view+json" in data:  # tqdm.auto's widget
            return True
        if PROGRESS.search(out.get("text", "") + data.get("text/plain", "")):
            return True
    return False


def _seconds(cell) -> float:
    """Run time of an executed cell, from nbclient's timing metadata."""
    timing = cell.metadata.get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    start, end = (datetime.fromisoformat(t.replace("Z", "+00:00")) for t in (start, end))
    return (end - start).total_seconds()


# ---------------------------------------------------------------------------------------------
# Static checks: fast
# ---------------------------------------------------------------------------------------------


def test_every_ready_lesson_has_a_source_and_nothing_is_stale():
    for slug in LESSONS:
        assert lesson_build.source_path(slug).is_file(), f"notebooks/{slug}.py is missing"
    stale = lesson_build.stale()
    assert not stale, (
        f"{stale} differ from their sources: run `make notebooks` (python -m effkit.lesson "
        "build) and commit; never edit a lesson's .ipynb by hand"
    )


def test_a_stale_notebook_is_detected(tmp_path, monkeypatch):
    slug = next(iter(LESSONS))
    (tmp_path / f"{slug}.py").write_text(lesson_build.source_path(slug).read_text())
    (tmp_path / f"{slug}.ipynb").write_text(lesson_build.render(slug))
    monkeypatch.setattr(lesson_build, "NOTEBOOKS", tmp_path)
    (tmp_path / "README.md").write_text(lesson_build.readme())
    monkeypatch.setattr(lesson_build, "ready", lambda: [LESSONS[slug]])
    assert lesson_build.stale() == []
    source = tmp_path / f"{slug}.py"
    source.write_text(source.read_text() + "\n# %%\nprint('an edit nobody rebuilt')\n")
    assert lesson_build.stale() == [f"notebooks/{slug}.ipynb"]


@pytest.mark.parametrize("slug", LESSONS)
def test_stored_without_outputs_or_execution_counts(slug):
    nb = _load(slug)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{slug}.ipynb cell {i} is stored with outputs"
            assert cell.execution_count is None, f"{slug}.ipynb cell {i} has an execution count"


@pytest.mark.parametrize("slug", LESSONS)
def test_lesson_shape(slug):
    nb = _load(slug)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and "**Goal:**" in first.source, "open with the goal"
    assert "**Run time**" in first.source and "RUNTIME_LINE" not in first.source
    for profile in ("cpu", "smoke"):  # e.g. "about 2.9 min in `cpu` (175 s), 47 s in `smoke`"
        assert re.search(rf"\d[^`]*`{profile}`", first.source), f"measured run time in {profile}"
    code = [c for c in nb.cells if c.cell_type == "code"]
    code_lines = [ln for c in code for ln in c.source.splitlines()]
    assert sum(ln.startswith(SWITCH) for ln in code_lines) == 1, f"one profile switch: {SWITCH}"
    switch_cell = next(i for i, c in enumerate(nb.cells) if SWITCH in c.source)
    assert switch_cell <= 3, f"the profile switch belongs near the top, not in cell {switch_cell}"
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    guesses = [m for c in code for m in GUESS.findall(c.source)]
    assert len(guesses) >= 2, f"{slug}: at least two predict-then-measure cells (GUESS_... = None)"
    assert markdown.count("**Predict.**") >= 2
    for guess in guesses:  # each guess is compared with a measurement
        called = re.compile(rf"check_guess\(\s*{guess}\b")  # however the formatter wraps the call
        assert any(called.search(c.source) for c in code), f"{guess} is never checked"
    turn = next(i for i, c in enumerate(nb.cells) if "## Your turn" in c.source)
    assert nb.cells[turn + 1].cell_type == "code", "a code cell follows 'Your turn'"
    summary = [c for c in nb.cells if "summary" in c.metadata.get("tags", [])]
    assert len(summary) == 1 and summary[0].cell_type == "code", "one code cell tagged 'summary'"
    assert "lesson.summary_header(" in summary[0].source, (
        "head the summary with lesson.summary_header"
    )
    assert "### References" in markdown and "https://" in markdown, "cite sources"
    exercise = f"exercises/{LESSONS[slug].assignment}/"
    assert "quiz" in markdown.lower() and exercise in markdown, f"point to the quiz in {exercise}"
    assert nb.cells[-1].cell_type == "markdown" and "What to try next" in nb.cells[-1].source
    assert "torch.cuda.amp" not in markdown + "\n".join(code_lines), "use torch.amp"
    assert "95% CI" not in markdown + "\n".join(code_lines), "state the real coverage instead"


# ---------------------------------------------------------------------------------------------
# Execution: slow
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("slug", LESSONS)
def test_lesson_runs_in_the_smoke_profile(slug, record_property):
    path, wall_s = executed(slug)
    record_property(f"{slug}_wall_s", round(wall_s, 1))
    print(f"{slug}: {wall_s:.1f} s wall time in the smoke profile")
    nb = nbformat.read(path, as_version=4)

    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{slug}: cells errored: {[e.ename for e in errors]}"
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2, f"{slug}: a diagram and a measured plot (image/png outputs)"
    slow_without_bar = [
        (i, round(_seconds(c)))
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and _seconds(c) > LONG_CELL_S and not _has_progress_bar(c)
    ]
    assert not slow_without_bar, f"{slug}: long cells without a progress bar: {slow_without_bar}"
    checks = [_text(c) for c in code if "lesson.check_guess(" in c.source]
    assert all("measured" in text for text in checks), f"{slug}: a guess was not compared"
    verdicts = re.findall(
        r"covering the median (\d+)% of the time over (\d+) pairs", "".join(_text(c) for c in code)
    )
    assert verdicts, f"{slug}: no A/B verdict printed"
    assert all(int(cov) >= 95 and int(n) >= 6 for cov, n in verdicts), verdicts

    summary = next(c for c in code if "summary" in c.metadata.get("tags", []))
    printed = _text(summary)
    assert printed.startswith("Summary"), f"{slug}: the summary cell printed {printed[:200]!r}"
    assert SMOKE_NOTE in printed.splitlines()[1], (
        f"{slug}: a smoke summary must say it is not evidence"
    )
    assert "CPU" in printed or "GPU" in printed or "NVIDIA" in printed, "name the device"
    assert re.search(r"\d", printed) and "nan" not in printed.lower(), printed
