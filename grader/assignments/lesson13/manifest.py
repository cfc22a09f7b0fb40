"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson13",
    worker_modules=("probes", "slo_task"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared: the reference
    # 10.0/10.0 on the 6 x 384 task with a drawn sensitive layer (load 12-13), the untouched stub
    # 0/10.0 on the former 3 x 512 task (load 5-12; it trains the model too, now ~2 s longer)
    reference_grading_s=101,
    stub_grading_s=48,
    points={"test_artifact": 2, "test_accuracy": 3, "test_latency": 3, "test_quiz": 2},
    # text of the reference answers the released notebook must not hold (tests/test_exercises.py)
    released_without=("nodes_to_quantize=[name",),
    timed_tests=("test_lesson13_exercise.py",),  # its tests time something: the timed lane
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "int8 weights are 4x fewer bytes to read per request, and integer multiply-adds are cheaper": (
            "bytes",
            "bandwidth",
            "4x",
            "smaller weights",
            "integer",
        ),
        "rounding error in every layer may change predictions, so accuracy must be measured": (
            "rounding",
            "accuracy",
            "error",
            "precision",
            "prediction",
        ),
        "under open-loop load requests wait in a queue that grows steeply as the rate nears capacity": (
            "queue",
            "wait",
            "capacity",
            "utilis",
            "utiliz",
        ),
    },
)
