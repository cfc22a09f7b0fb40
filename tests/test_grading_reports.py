"""benchmarks/grading_reports.py: the refactor's safety net keeps what must not change, and only that."""

import copy

from script_module import load  # tests/ is on sys.path

reports = load("benchmarks/grading_reports.py")

REPORT = {
    "total": 9.0,
    "max_total": 12,
    "cells": [
        {"grade_id": "test_weights", "points": 4, "max_points": 4, "error": ""},
        {
            "grade_id": "test_speed",
            "points": 0,
            "max_points": 5,
            "error": "speedup 1.07x, target 1.30x",
        },
    ],
    "out_of_kernel": {
        "cells": {"test_weights": {"passed": True, "reason": "", "lines": ["ok 8 steps"]}},
        "flags": ["timed run 2 took 4.1 s"],
    },
    "performance": {"problems": ["accuracy -0.62 pp below the baseline"], "flags": []},
}


def test_figures_that_move_run_to_run_are_not_differences():
    again = copy.deepcopy(REPORT)
    again["cells"][1]["error"] = "speedup 1.11x, target 1.30x"
    again["out_of_kernel"]["flags"] = ["timed run 2 took 3.7 s"]
    again["performance"]["problems"] = ["accuracy -0.55 pp below the baseline"]
    assert reports.differences({"a": reports.essence(REPORT)}, {"a": reports.essence(again)}) == []


def test_a_changed_point_verdict_or_message_is_a_difference():
    for change in (
        lambda r: r["cells"][0].update(points=3),
        lambda r: r["out_of_kernel"]["cells"]["test_weights"].update(passed=False),
        lambda r: r["cells"][1].update(error="speedup 1.07x, but the work check failed"),
        lambda r: r["performance"]["problems"].append("a second problem"),
        lambda r: r["out_of_kernel"]["flags"].clear(),
    ):
        changed = copy.deepcopy(REPORT)
        change(changed)
        diff = reports.differences({"a": reports.essence(REPORT)}, {"a": reports.essence(changed)})
        assert len(diff) == 1 and diff[0].startswith("a:"), diff
    assert (
        reports.differences({"a": reports.essence(REPORT)}, {}) != []
    )  # a notebook gone is a difference
