"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson4",
    worker_modules=("probes", "accum_task"),
    points={"test_full_windows": 4, "test_last_window": 2, "test_recipe": 4, "test_quiz": 2},
)
