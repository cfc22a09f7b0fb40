"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson3",
    worker_modules=("probes", "amp_checks", "runtime", "text_data"),
    points={"test_policy": 2, "test_step": 2, "test_scaler": 3, "test_speed": 5, "test_quiz": 2},
)
