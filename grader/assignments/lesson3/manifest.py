"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson3",
    worker_modules=("probes", "amp_checks", "runtime", "text_data"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 14.0/14.0, the untouched stub 0/14.0
    reference_grading_s=219,
    stub_grading_s=29,
    points={"test_policy": 2, "test_step": 2, "test_scaler": 3, "test_speed": 5, "test_quiz": 2},
)
