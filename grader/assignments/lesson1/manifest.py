"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson1",
    worker_modules=("probes", "task"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 12.0/12.0, the untouched stub 0/12.0
    reference_grading_s=27,
    stub_grading_s=48,
    points={"test_throughput": 4, "test_data_wait": 2, "test_bottleneck": 4, "test_quiz": 2},
)
