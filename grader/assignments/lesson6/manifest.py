"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson6",
    worker_modules=("probes", "task"),
    points={"test_resume": 4, "test_torn": 2, "test_best": 2, "test_overhead": 2, "test_quiz": 2},
)
