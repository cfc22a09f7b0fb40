"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson13",
    worker_modules=("probes", "slo_task"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 10.0/10.0, the untouched stub 0/10.0
    reference_grading_s=152,
    stub_grading_s=48,
    points={"test_artifact": 2, "test_accuracy": 3, "test_latency": 3, "test_quiz": 2},
)
