"""Calibrate lesson 13's targets: accuracy drop, agreement and P95 ratio of three submissions per task seed.

    python grader/assignments/lesson13/calibration/lesson13_calibrate.py 1 2 3 4 5 6
    python grader/assignments/lesson13/calibration/lesson13_calibrate.py --only reference $(seq 1001 1300)

For each grading seed it runs the grader's own checks (grader/assignments/lesson13/checks.py) in this
process on the reference export (measures each layer, keeps the sensitive one in fp32), the fp32 model
exported unchanged, the fixed recipe "int8 except the head", and every layer quantized, and prints each verdict line: the held-out accuracy against the fp32 baseline's, the
agreement, and the P95 ratio with its interval. The learner's export runs in this process; the file
is served and timed in the grader's own sandboxed server, as in a grading (root: namespaces, cgroups).
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]  # grader/assignments/<lesson>/calibration/
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from exercise_cells import solution_cells  # noqa: E402

from effkit.measure import device_name  # noqa: E402
from grader import assignments  # noqa: E402
from grader.assignments.lesson13 import probes, slo_task  # noqa: E402
from grader.sandbox.probe import CallResult  # noqa: E402
from grader.scoring.checks import CheckFailed, Context  # noqa: E402

A = assignments.get("lesson13")
SOLUTION = ROOT / "solutions" / "lesson13" / "lesson13.ipynb"
EXPORT = dict(solution_cells(SOLUTION, SOLUTION))["export_for_slo"]
# the reference up to its measurement: the fp32 export and its predictions, nothing quantized
EXPORTED = EXPORT[: EXPORT.index("    # per-layer sensitivity")]
MATMULS = '    names = [n.name for n in onnx.load(fp32_path).graph.node if n.op_type in ("Gemm", "MatMul")]\n'
EXCLUDE = (
    "    quantize_dynamic(fp32_path, path, weight_type=QuantType.QInt8, nodes_to_exclude={})\n"
)
VARIANTS = {
    "reference": EXPORT,
    "fp32_unchanged": EXPORTED.replace('fp32_path = path + ".fp32.onnx"', "fp32_path = path"),
    "exclude_the_head": EXPORTED + MATMULS + EXCLUDE.format('[names[-1], names[-1] + "_MatMul"]'),
    "quantize_everything": EXPORTED + MATMULS + EXCLUDE.format("[]"),
    # the one layer never drawn (it reads the features), alone in int8: always accurate, is it fast?
    "int8_first_layer_only": EXPORTED
    + MATMULS
    + "    quantize_dynamic(fp32_path, path, weight_type=QuantType.QInt8, "
    + 'nodes_to_quantize=[names[0], names[0] + "_MatMul"])\n',
}


class InProcess:
    def __init__(self, source: str):
        self.ns: dict = {}
        exec(A.setup_source, self.ns)  # noqa: S102  (repository code)
        exec(source, self.ns)  # noqa: S102

    def call(self, probe, timeout_s, serve=None, max_blob=None, **args):
        data, blobs = getattr(probes, f"probe_{probe}")(self, **args)
        return CallResult(True, data, blobs)


def main(seeds: list[int]) -> None:
    print(
        f"device: {device_name('cpu')}; load {os.getloadavg()}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    for seed in seeds:
        layer = slo_task.draw_planting(random.Random(seed))[3]
        print(
            f"seed {seed} draws the planted activations at the input of Linear {layer} (6: the head)"
        )
        for name, source in VARIANTS.items():
            session, rng, start = InProcess(source), random.Random(seed), time.perf_counter()
            for gid in ("test_artifact", "test_accuracy", "test_latency"):
                ctx = Context(session, rng)
                try:
                    A.cell_checks[gid](ctx)
                    print(f"seed {seed} {name:20s} {gid:14s} pass {' '.join(ctx.lines).strip()}")
                except CheckFailed as err:
                    print(f"seed {seed} {name:20s} {gid:14s} FAIL {str(err)[:400]}")
            print(
                f"seed {seed} {name:20s} {time.perf_counter() - start:.1f} s; load {os.getloadavg()[0]:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == [
        "--only"
    ]:  # e.g. --only reference: one submission, many gradings (a busy-core failure rate)
        VARIANTS = {args[1]: VARIANTS[args[1]]}
        args = args[2:]
    main([int(s) for s in args] or [1, 2, 3])
