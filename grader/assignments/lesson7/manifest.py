"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson7",
    worker_modules=("probes",),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 12.0/12.0, the untouched stub 0/12.0
    reference_grading_s=149,
    stub_grading_s=46,
    points={
        "test_coverage": 2,
        "test_budget": 2,
        "test_padding": 2,
        "test_randomness": 2,
        "test_speed": 2,
        "test_quiz": 2,
    },
    withheld=("effkit.length_buckets.bucket_batches",),
    # text of the reference answers the released notebook must not hold (tests/test_exercises.py)
    released_without=("argsort",),
    timed_tests=("test_lesson7_exercise.py",),  # its tests time something: the timed lane
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "rows of similar length share a batch, so its width stays close to every row's length": (
            "similar length",
            "same length",
            "longest row",
            "sort",
            "group",
        ),
        "padded positions are still computed (projections, feed-forward, attention), then thrown away": (
            "still",
            "thrown away",
            "wasted",
            "flop",
            "matmul",
        ),
        "grouped batches are less random (not i.i.d.), changing the gradient noise; shuffling helps": (
            "i.i.d",
            "iid",
            "gradient noise",
            "shuffl",
            "correlat",
        ),
    },
)
