"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson8",
    worker_modules=("probes", "lora_task"),
    points={"test_layer": 3, "test_inject": 2, "test_recipe": 3, "test_quiz": 2},
    clocked=False,  # graded on counts (bytes, epochs, memory), not on a clock
)
