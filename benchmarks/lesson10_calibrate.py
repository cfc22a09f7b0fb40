"""Lesson 10's grader calibration: the reference diagnose() against the grader's own planted cases.

``python benchmarks/lesson10_calibrate.py 1 2 3 4 5`` draws each seed's 8 cases exactly as a grading does
(``checks.draw_cases``), profiles them in this process (``checks.profile_case``) and prints, per grading,
how many labels the reference solution and effkit's doctor get right, and every miss with its profile's
key figures. PASS_AT must sit below the reference's worst grading.
"""

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from exercise_cells import solution_cells  # noqa: E402

from effkit import doctor  # noqa: E402
from grader.assignments.lesson10 import checks  # noqa: E402

SOLUTION = ROOT / "solutions" / "lesson10" / "lesson10.ipynb"


def main(seeds: list[int]) -> None:
    ns: dict = {}
    exec(checks.SETUP_SOURCE, ns)  # noqa: S102  (the repository's own reference)
    exec(dict(solution_cells(SOLUTION, SOLUTION))["diagnose"], ns)  # noqa: S102
    worst = len(checks.LABELS) + 99
    for seed in seeds:
        cases = checks.draw_cases(random.Random(seed))
        right_ref = right_doc = 0
        for label, case_seed in cases:
            p = checks.profile_case(label, case_seed)
            ref, doc = ns["diagnose"](p), doctor.diagnose(p)[0].label
            right_ref += ref == label
            right_doc += doc == label
            if ref != label or doc != label:
                r = p["ranges_ms"]
                print(f"  seed {seed}: planted {label}, reference {ref}, doctor {doc}; step {p['step_ms']:.1f} ms, "
                      f"data {r['data'] / p['step_ms']:.0%}, optimizer {r['optimizer'] / p['step_ms']:.0%}, "
                      f"matmul median {p['matmul_us_median']:.0f} us, syncs {p['syncs_per_step']:.0f}")
        worst = min(worst, right_ref)
        print(f"seed {seed}: reference {right_ref}/{len(cases)}, doctor {right_doc}/{len(cases)}", flush=True)
    print(f"reference's worst grading: {worst}/{checks.CASES}; PASS_AT = {checks.PASS_AT}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1, 2, 3])
