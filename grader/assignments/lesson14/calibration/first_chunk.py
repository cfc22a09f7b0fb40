"""The work check's chunk-0 direction for the capstone's reference (``GradingSpec.first_cosine``).

Runs the grader's measurement of the reference recipe, and of each leave-one-out ablation (every
one a grading runs), ``--rounds`` times, and writes each run's chunk-0 cosine and size ratio against
naive's first chunk, and every chunk's size ratio, to ``--out``. The bound must sit under every
honest value and far above the random-direction null (1/sqrt(parameters)).

    PYTHONPATH=. OMP_WAIT_POLICY=PASSIVE python grader/assignments/lesson14/calibration/first_chunk.py \
        --rounds 2 --out /tmp/first-chunk.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from grader import assignments
from grader.assignments.lesson14 import capstone, recipe
from grader.cli.tools import reference_cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    a = assignments.get("lesson14")
    cells = reference_cells(a)
    spec = a.spec("cpu", None)
    rec = recipe.read(capstone._source(cells))
    arms = [("full", rec.hooks())] + [(f"without {c}", rec.hooks(without=c)) for c in rec.shares]
    rows = []
    for i in range(args.rounds):
        for label, hooks in arms:
            m = capstone._measure(
                a, cells, dataclasses.replace(spec, learner_hooks=hooks), "cpu", lambda _: None
            )
            vs = [w for w in m.work_checks if w["against"] == "baseline"]
            first = [(w["cosine"], w["ratio"]) for w in vs if w["chunk"] == 0]
            rows.append(
                {"round": i, "arm": label, "first_chunk": first, "problems": m.work_problems}
                | {"ratios": [w["ratio"] for w in vs]}
            )
            print(f"round {i + 1} {label}: chunk 0 (cosine, size) {first}", flush=True)
            with open(args.out, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
