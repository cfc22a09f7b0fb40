"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson13",
    worker_modules=("probes", "slo_task"),
    points={"test_artifact": 2, "test_accuracy": 3, "test_latency": 3, "test_quiz": 2},
)
