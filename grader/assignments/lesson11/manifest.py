"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson11",
    worker_modules=("probes", "ddp_task", "memory_task"),
    points={
        "test_weights": 4,
        "test_sampler": 3,
        "test_no_sync": 2,
        "test_memory_budget": 3,
        "test_quiz": 2,
    },
    clocked=False,  # graded on counts (bytes, epochs, memory), not on a clock
)
