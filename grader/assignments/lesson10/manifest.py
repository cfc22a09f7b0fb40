"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson10",
    worker_modules=("probes", "slow_step"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 12.0/12.0, the untouched stub 0/12.0
    reference_grading_s=79,
    stub_grading_s=61,
    points={
        "test_diagnose": 5,
        "test_fast_step_equal": 2,
        "test_fast_step_speed": 3,
        "test_quiz": 2,
    },
    withheld=("effkit.doctor.diagnose",),
)
