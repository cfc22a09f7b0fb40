"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson5",
    worker_modules=("probes", "ckpt_checks"),
    points={
        "test_gradients": 3,
        "test_budget": 2,
        "test_speed": 2,
        "test_least_recompute": 1,
        "test_quiz": 2,
    },
)
