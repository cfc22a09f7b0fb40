"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson10",
    worker_modules=("probes", "slow_step"),
    points={
        "test_diagnose": 5,
        "test_fast_step_equal": 2,
        "test_fast_step_speed": 3,
        "test_quiz": 2,
    },
    withheld=("effkit.doctor.diagnose",),
)
