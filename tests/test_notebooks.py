"""The lesson notebooks: stored clean, built from their source, and run top to bottom.

Each lesson is executed with nbclient in the ``smoke`` profile (CPU, synthetic data in the real
formats), from ``notebooks/`` as a learner's Jupyter would, with the venv's ``python3`` kernel.
A lesson passes when no cell errors, it draws at least one plot, its long cells show progress
bars, and its summary cell prints measured numbers. Each lesson's wall time is printed (run with
``-rP`` or ``-s`` to see it) and recorded as a junit property.
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from datetime import datetime
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
LESSONS = {
    "01_measure_first": "exercises/lesson1/",
    "02_feed_the_accelerator": "exercises/lesson2/",
    "03_mixed_precision": "exercises/lesson3/",
}
SWITCH = (
    'PROFILE = "gpu" if torch.cuda.is_available() else os.environ.get("EFFKIT_PROFILE", "smoke")'
)
CELL_TIMEOUT_S = 1200  # per cell: generous, CI machines are shared
LONG_CELL_S = 60  # a cell running longer than this must show a progress bar
PROGRESS = re.compile(r"\d+%\|")  # tqdm's text bar, when no widget front-end is available


def _load(name: str):
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


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


@pytest.mark.parametrize("name", LESSONS)
def test_stored_without_outputs_or_execution_counts(name):
    nb = _load(name)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{name}.ipynb cell {i} is stored with outputs: clear them"
            assert cell.execution_count is None, f"{name}.ipynb cell {i} has an execution count"


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_shape_goal_switch_summary_next_steps(name):
    nb = _load(name)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and "**Goal:**" in first.source, "open with the goal"
    code_lines = [ln for c in nb.cells if c.cell_type == "code" for ln in c.source.splitlines()]
    assert code_lines.count(SWITCH) == 1, f"exactly one profile switch line: {SWITCH}"
    switch_cell = next(i for i, c in enumerate(nb.cells) if SWITCH in c.source.splitlines())
    assert switch_cell <= 3, f"the profile switch belongs near the top, not in cell {switch_cell}"
    summary = [c for c in nb.cells if "summary" in c.metadata.get("tags", [])]
    assert len(summary) == 1 and summary[0].cell_type == "code", "one code cell tagged 'summary'"
    last = nb.cells[-1]
    assert last.cell_type == "markdown" and "What to try next" in last.source
    assert LESSONS[name] in last.source, f"point to the matching exercise, {LESSONS[name]}"
    assert "torch.cuda.amp" not in json.dumps(nb), "use torch.amp, never torch.cuda.amp"


def test_notebooks_match_their_source_script():
    script = NOTEBOOKS / "_make_notebooks.py"
    spec = importlib.util.spec_from_file_location("make_notebooks", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert set(module.LESSONS) == set(LESSONS)
    for name, text in module.LESSONS.items():
        built = nbformat.writes(module.build(name, text))
        stored = (NOTEBOOKS / f"{name}.ipynb").read_text()
        assert built.rstrip("\n") == stored.rstrip("\n"), (
            f"{name}.ipynb differs from notebooks/_make_notebooks.py: edit the script and run "
            "`.venv/bin/python notebooks/_make_notebooks.py` (never edit the .ipynb by hand)"
        )


# ---------------------------------------------------------------------------------------------
# Execution: slow
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_home(tmp_path_factory) -> Path:
    """One private EFFKIT_DATA for all lessons: generated once, the user's cache untouched."""
    return tmp_path_factory.mktemp("effkit_data")


@pytest.mark.slow
@pytest.mark.parametrize("name", LESSONS)
def test_lesson_runs_in_the_smoke_profile(name, data_home, monkeypatch, record_property):
    # The kernel is a child process: it inherits this environment.
    monkeypatch.setenv("EFFKIT_PROFILE", "smoke")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("EFFKIT_DATA", str(data_home))
    nb = _load(name)
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(NOTEBOOKS)}},  # cwd, as when opened in Jupyter
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the traceback, if any cell fails
    wall_s = time.perf_counter() - start
    record_property(f"{name}_wall_s", round(wall_s, 1))
    print(f"{name}: {wall_s:.1f} s wall time in the smoke profile")

    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{name}: cells errored: {[e.ename for e in errors]}"
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert images, f"{name}: no plot (image/png output) was shown"
    slow_without_bar = [
        (i, round(_seconds(c))) for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and _seconds(c) > LONG_CELL_S and not _has_progress_bar(c)
    ]  # fmt: skip
    assert not slow_without_bar, f"{name}: long cells without a progress bar: {slow_without_bar}"

    summary = next(c for c in code if "summary" in c.metadata.get("tags", []))
    printed = _text(summary)
    assert printed.startswith("Summary"), f"{name}: the summary cell printed {printed[:200]!r}"
    assert "CPU" in printed or "GPU" in printed or "NVIDIA" in printed, "name the device"
    assert re.search(r"\d", printed) and "nan" not in printed.lower(), printed
