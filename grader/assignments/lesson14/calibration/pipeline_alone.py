"""The capstone's "pipeline alone" rule, measured: the reference's pipeline and a review's attack C.

Runs ``capstone._own_pipeline`` (the grader's two one-epoch measurements: the pipeline against
naive's DataLoader as written, then against it without its workers) ``--rounds`` times for each
submission, and writes each round's ratios and verdict to ``--out``. Attack C is naive's pipeline
with ``num_workers=0``: a setting, which the rule must not credit.

    PYTHONPATH=. OMP_WAIT_POLICY=PASSIVE python grader/assignments/lesson14/calibration/pipeline_alone.py \
        --rounds 3 --out /tmp/pipeline-alone.json
"""

from __future__ import annotations

import argparse
import json
import time

from grader import assignments
from grader.assignments.lesson14 import capstone, recipe
from grader.cli.tools import reference_cells

ATTACK_C = '''class P(cifar.TorchvisionPipeline):
    """The naive pipeline without its DataLoader workers: every image in the main process."""

    def __init__(self, dataset, batch_size, device, seed):
        super().__init__(dataset, batch_size, device, seed, num_workers=0)

    def __iter__(self):
        yield from super().__iter__()


CHANGES = {
    "device_pipeline": {"pipeline": P},
    "channels_last": {"channels_last": True},
    "small_batch": {"batch_size": 32, "lr": 0.025},
}
PREDICTED_SHARES = {"device_pipeline": 0.3, "channels_last": 0.0, "small_batch": 0.4}
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    a = assignments.get("lesson14")
    ref = reference_cells(a)
    cells = {"reference": ref, "attack C": [(k, ATTACK_C if k == "recipe" else v) for k, v in ref]}
    rows = []
    for i in range(args.rounds):
        for name, these in cells.items():
            rec = recipe.read(capstone._source(these))
            report = {"phases_s": {}, "device_class": "cpu"}
            t0 = time.perf_counter()
            points, said, gains = capstone._own_pipeline(
                a, these, a.spec("cpu", None), rec, "cpu", lambda _: None, report, 6.0
            )
            rows.append(
                {"round": i, "who": name, "tier_kept": gains, "said": said}
                | {"alone": report.get("pipeline_alone"), "seconds": time.perf_counter() - t0}
            )
            print(f"round {i + 1} {name}: {'gains' if gains else 'no tier'}; {said}", flush=True)
            with open(args.out, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
