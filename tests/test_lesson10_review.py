"""Lesson 10 after its fresh review (2026-12-06, scored 6/10): the sentences it found unsupported must not
come back, and the "Your turn" cell must do what its text asks. Reads the jupytext source (no execution);
the profiler-overhead reading itself is tested in tests/test_profiling.py and tests/test_doctor.py."""

from __future__ import annotations

import re

import pytest

from effkit import lesson_build

SLUG = "10_profiling"

RETIRED = [  # (pattern of the claim as it was, why it was unsupported)
    (
        r"gaps between operators are Python",
        "the plot shows gaps, not what fills them: Python, the autograd engine and the profiler's own bookkeeping",
    ),
    (
        r"from x1\.0 to x1\.6",
        "a range from earlier recordings in prose goes stale: each report prints its own ratio",
    ),
    (
        r"42% and its fix saved 49%",
        "an earlier recording's figures, not what this run prints",
    ),
    (
        r"ranked by that small measured cost",
        "a sync's share (the time inside the reads) is not its cost: its fix saved 31% of the step at a 0% share",
    ),
    (
        r"opens at https://pytorch\.org/memory_viz and shows\s*\n#\s*activations growing",
        "no GPU ran this lesson: what the snapshot would show is the documentation's, said as such",
    ),
    (
        r"the clean classifier with a change of yours",
        "the cell planted the optimizer loop, and TrainStep's batch_size is a label, not the batch",
    ),
    (
        r"start about x\{recording:\.2f\} per step",
        "a ratio under 1 is noise, not a cost: the printout says so instead",
    ),
]


def _source() -> str:
    return lesson_build.source_path(SLUG).read_text()


@pytest.mark.parametrize(("pattern", "why"), RETIRED, ids=[p[:30] for p, _ in RETIRED])
def test_a_retired_claim_is_not_back(pattern, why):
    found = re.search(pattern, _source(), re.M)
    assert not found, f"notebooks/{SLUG}.py says {found.group(0)!r} again: {why}"


def _cells(source: str) -> list[str]:
    return ["# %%" + cell for cell in re.split(r"^# %%", source, flags=re.M)[1:]]


def test_your_turn_profiles_fixes_and_profiles_again_as_its_text_says():
    cells = _cells(_source())
    turn = next(i for i, c in enumerate(cells) if "## Your turn" in c)
    text, code = cells[turn], cells[turn + 1]
    assert "fix the first one and profile again" in text
    assert code.count("profiled(") == 2 and code.count("doctor.report(") == 2, code
    assert (
        "fused=True" in code and "fused=True" in text
    )  # the fix the code applies is the one the text names
    assert "lesson.ab(" in code  # and an A/B, not two single medians, says whether it paid


def test_every_profiler_overhead_printed_goes_through_the_noise_reading():
    """The doctor's report prints the ratio through doctor.overhead_note; the lesson prints none itself."""
    src = _source()
    assert "profiler_overhead" not in src and "doctor.overhead_note(patient)" in src
    printed = [ln for ln in src.splitlines() if "x{recording" in ln]  # the A/B's recording factor
    assert printed and all("if recording >= 1" in ln for ln in printed), printed
