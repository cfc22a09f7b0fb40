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
    # text of the reference answers the released notebook must not hold (tests/test_exercises.py)
    released_without=("ddp.no_sync()", "for c in module.children()"),
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "plain DDP keeps the whole model, its gradients and the optimizer state on every rank": (
            "every rank",
            "replicat",
            "redundan",
            "full copy",
            "duplicat",
        ),
        "ZeRO shards optimizer state (stage 1), gradients (2) and parameters (3, FSDP) over the ranks": (
            "shard",
            "1/n",
            "partition",
            "split",
            "divide",
        ),
        "stages 1-2 cost about an all-reduce; FSDP also all-gathers parameters in forward and backward": (
            "gather",
            "allgather",
            "reduce scatter",
            "1.5",
            "more communication",
        ),
    },
)
