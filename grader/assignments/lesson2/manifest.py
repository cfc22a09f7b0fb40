"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson2",
    worker_modules=("probes", "probe_data", "runtime"),
    points={"test_contract": 3, "test_augmentation": 2, "test_speed": 5, "test_quiz": 2},
)
