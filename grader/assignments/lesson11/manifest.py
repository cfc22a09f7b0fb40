"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson11",
    device="cpu",  # its checks' workers see no GPU (checks.py: cpu_only)
    worker_modules=("probes", "ddp_task", "memory_task"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 14.0/14.0, the untouched stub 0/14.0
    reference_grading_s=78,
    stub_grading_s=69,
    points={
        "test_weights": 4,
        "test_sampler": 3,
        "test_no_sync": 2,
        "test_memory_budget": 3,
        "test_quiz": 2,
    },
    clocked=False,  # graded on counts (bytes, epochs, memory), not on a clock
)
