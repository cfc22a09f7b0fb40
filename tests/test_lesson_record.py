"""Recorded lesson runs (effkit.lesson_record): the manifest, staleness, the site page's banner, and
the run time each lesson states against its quiet recorded run."""

from __future__ import annotations

import json
import re
import shutil

import nbformat
import pytest
from script_module import load

from effkit import lesson_build, lesson_record
from effkit.syllabus import ready


def _fake_run(slug, folder):  # what execute() leaves behind, without minutes of running
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(lesson_build.NOTEBOOKS / f"{slug}.ipynb", folder / f"{slug}.ipynb")
    return folder / f"{slug}.ipynb", 123.4


def test_a_record_notes_how_it_ran_and_turns_stale_when_the_source_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(lesson_record, "_load_per_core", lambda: 0.4)
    entry = lesson_record.record("08_peft_lora", tmp_path, run=_fake_run)
    saved = json.loads((tmp_path / "manifest.json").read_text())["08_peft_lora"]
    assert saved == entry and entry["profile"] == "cpu" and entry["wall_s"] == 123.4
    assert entry["quiet"] and entry["source_sha256"] == lesson_record.source_hash("08_peft_lora")
    assert lesson_record.state("08_peft_lora", tmp_path) == "current"
    assert lesson_record.state("07_dynamic_padding", tmp_path) == "missing"
    banner = lesson_record.banner("08_peft_lora", tmp_path)
    assert "a quiet machine" in banner and "earlier version" not in banner
    monkeypatch.setattr(
        lesson_record, "source_hash", lambda slug: "0" * 64
    )  # the source was edited
    assert lesson_record.state("08_peft_lora", tmp_path) == "stale"
    assert "earlier version of this lesson" in lesson_record.banner("08_peft_lora", tmp_path)


def test_a_run_under_load_is_marked_so_and_the_profile_is_restored(tmp_path, monkeypatch):
    loads = iter([0.5, 2.5])
    monkeypatch.setattr(lesson_record, "_load_per_core", lambda: next(loads))
    monkeypatch.setenv("EFFKIT_PROFILE", "smoke")
    seen = {}

    def run(slug, folder):
        seen["profile"] = lesson_record.os.environ["EFFKIT_PROFILE"]
        return _fake_run(slug, folder)

    entry = lesson_record.record("08_peft_lora", tmp_path, run=run)
    assert seen["profile"] == "cpu" and lesson_record.os.environ["EFFKIT_PROFILE"] == "smoke"
    assert not entry["quiet"] and entry["load_per_core"] == [0.5, 2.5]
    assert "under load (2.5 per core)" in lesson_record.banner("08_peft_lora", tmp_path)


def test_the_site_page_of_a_recorded_lesson_opens_with_its_banner(tmp_path, monkeypatch):
    monkeypatch.setattr(lesson_record, "_load_per_core", lambda: 0.2)
    lesson_record.record("08_peft_lora", tmp_path, run=_fake_run)
    monkeypatch.setattr(lesson_record, "RECORDED", tmp_path)
    page = tmp_path / "page.ipynb"
    load("docs/build.py")._recorded_page("08_peft_lora", page)
    cells = nbformat.read(page, as_version=4).cells
    assert cells[1].cell_type == "markdown" and cells[1].source.startswith("*Outputs recorded on")


def _stated_cpu_seconds(slug: str) -> float | None:
    """The run time the lesson's header states for the cpu profile ("about 3.5 min in `cpu`")."""
    head = lesson_build.source_path(slug).read_text().split("# **Profiles", 1)[0]
    m = re.search(r"about\s*(?:#\s*)?([\d.]+) (min|s) in\s*(?:#\s*)?`cpu`", head)
    return None if m is None else float(m.group(1)) * (60 if m.group(2) == "min" else 1)


QUIET_CURRENT = [
    lesson.slug
    for lesson in ready()
    if lesson_record.state(lesson.slug) == "current"
    and lesson_record.manifest()[lesson.slug]["quiet"]
]


@pytest.mark.skipif(
    not QUIET_CURRENT, reason="no lesson has a current recording from a quiet machine yet"
)
@pytest.mark.parametrize("slug", QUIET_CURRENT)
def test_a_lessons_stated_run_time_is_its_quiet_recorded_one(slug):
    stated, recorded = _stated_cpu_seconds(slug), lesson_record.manifest()[slug]["wall_s"]
    assert stated is not None, f"notebooks/{slug}.py states no `about N min in `cpu`` run time"
    assert 0.75 <= stated / recorded <= 1.25, (
        f"{slug} states {stated:.0f} s, recorded {recorded:.0f} s"
    )


def test_restating_the_run_time_keeps_a_recording_current_and_any_other_edit_does_not(
    tmp_path, monkeypatch
):
    src = tmp_path / "07_x.py"
    src.write_text("# # Lesson\n#\n# **Run time** about 2 min in\n# `cpu`.\n#\n# Text.\nx = 1\n")
    monkeypatch.setattr(lesson_record, "source_path", lambda slug: src)
    before = lesson_record.source_hash("07_x")
    src.write_text(
        "# # Lesson\n#\n# **Run time** about 3.5 min in\n# `cpu` (203 s).\n#\n# Text.\nx = 1\n"
    )
    assert lesson_record.source_hash("07_x") == before
    src.write_text(
        "# # Lesson\n#\n# **Run time** about 3.5 min in\n# `cpu` (203 s).\n#\n# Text.\nx = 2\n"
    )
    assert lesson_record.source_hash("07_x") != before


def test_recorded_outputs_go_back_only_into_the_cells_whose_source_is_unchanged(tmp_path):
    clean = lesson_build.NOTEBOOKS / "05_activation_checkpointing.ipynb"
    nb = nbformat.read(clean, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code):  # an "executed" copy: every code cell printed its index
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"cell {i}\n")]
        cell.execution_count = i + 1
    executed = tmp_path / "run.ipynb"
    nbformat.write(nb, executed)
    lesson_record.keep_outputs(executed, tmp_path / "x.outputs.json")
    edited = nbformat.read(clean, as_version=4)
    [c for c in edited.cells if c.cell_type == "code"][1].source += "\nprint('edited')"
    nbformat.write(edited, tmp_path / "edited.ipynb")
    back = [
        c
        for c in lesson_record.with_outputs(
            tmp_path / "edited.ipynb", tmp_path / "x.outputs.json"
        ).cells
        if c.cell_type == "code"
    ]
    assert back[0].outputs[0]["text"] == "cell 0\n" and back[0].execution_count == 1
    assert (
        back[1].outputs == [] and back[1].execution_count is None
    )  # edited since: no stale output
    assert back[-1].outputs[0]["text"] == f"cell {len(code) - 1}\n"


def test_a_recording_runs_the_current_source_not_the_built_notebook(tmp_path, monkeypatch):
    """A recording is keyed by its source's hash, so it must run that source: run from a built
    .ipynb that `make notebooks` had not refreshed, three lessons were recorded from their old text
    and marked current (2026-12-06)."""
    import nbclient

    seen = {}

    class Client:  # nbclient's, without a kernel: what it was asked to run
        def __init__(self, nb, **kwargs):
            seen["nb"] = nb

        def execute(self):
            pass

    rendered = lesson_build.render
    marker = "# edited after the last build"

    def edited(slug):  # the source as edited since `make notebooks` last ran
        nb = nbformat.reads(rendered(slug), as_version=4)
        nb.cells[0].source = marker + "\n" + nb.cells[0].source
        return nbformat.writes(nb)

    monkeypatch.setattr(lesson_build, "render", edited)
    monkeypatch.setattr(nbclient, "NotebookClient", Client)
    lesson_build.execute("08_peft_lora", tmp_path)
    assert seen["nb"].cells[0].source.startswith(marker)


def test_a_recording_keeps_each_cells_seconds_where_nbclient_stamped_them(tmp_path):
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("y = 2")]
    )
    nb.cells[0].metadata["execution"] = {
        "iopub.execute_input": "2026-12-07T06:00:00.250000Z",
        "shell.execute_reply": "2026-12-07T06:01:02.750000Z",
    }
    executed = tmp_path / "run.ipynb"
    nbformat.write(nb, executed)
    lesson_record.keep_outputs(executed, tmp_path / "out.json")
    cells = json.loads((tmp_path / "out.json").read_text())["cells"]
    assert [c["seconds"] for c in cells] == [62.5, None]
