"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson6",
    worker_modules=("probes", "task"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 12.0/12.0, the untouched stub 0/12.0
    reference_grading_s=158,
    stub_grading_s=134,
    points={"test_resume": 4, "test_torn": 2, "test_best": 2, "test_overhead": 2, "test_quiz": 2},
    # the save and the load themselves: the source-text check saw only the names
    # text of the reference answers the released notebook must not hold (tests/test_exercises.py)
    released_without=("os.fsync",),
    timed_tests=("test_lesson6_exercise.py",),  # its tests time something: the timed lane
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "without the sampler's position the resumed run replays or skips batches": (
            "replay",
            "skip",
            "same batches",
            "data order",
            "repeat",
        ),
        "without the RNG state the random draws (dropout, augmentation) differ": (
            "random",
            "dropout",
            "generator",
            "noise",
            "draw",
        ),
        "an atomic write renames a finished temporary file: a kill leaves the old file or the new": (
            "rename",
            "replace",
            "temporary",
            "old or the new",
            "half",
        ),
    },
)
