"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson9",
    worker_modules=("probes",),
    points={"test_loss_value": 3, "test_loss_gradient": 2, "test_recipe": 3, "test_quiz": 2},
    withheld=("effkit.distill.kd_loss",),
)
