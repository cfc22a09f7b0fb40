"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson1",
    worker_modules=("probes", "task"),
    points={"test_throughput": 4, "test_data_wait": 2, "test_bottleneck": 4, "test_quiz": 2},
)
