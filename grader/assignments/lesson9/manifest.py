"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson9",
    worker_modules=("probes",),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 10.0/10.0, the untouched stub 0/10.0
    reference_grading_s=72,
    stub_grading_s=21,
    points={"test_loss_value": 3, "test_loss_gradient": 2, "test_recipe": 3, "test_quiz": 2},
    withheld=("effkit.distill.kd_loss",),
)
