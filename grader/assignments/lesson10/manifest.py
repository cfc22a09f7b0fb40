"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson10",
    worker_modules=("probes", "slow_step"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 12.0/12.0, the untouched stub 0/12.0
    reference_grading_s=79,
    stub_grading_s=61,
    points={
        "test_diagnose": 5,
        "test_fast_step_equal": 2,
        "test_fast_step_speed": 3,
        "test_quiz": 2,
    },
    withheld=("effkit.doctor.diagnose",),
    # text of the reference answers the released notebook must not hold (tests/test_exercises.py)
    released_without=("per_call_us",),
    timed_tests=("test_lesson10_exercise.py",),  # its tests time something: the timed lane
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "the step is a sum of parts: without the largest, the others are a bigger share of less time": (
            "sum",
            "shorter",
            "bigger share",
            "larger share",
            "remaining",
        ),
        "the next bottleneck was there all along, ranked lower or below its rule's threshold": (
            "all along",
            "already",
            "threshold",
            "hidden",
            "second",
        ),
        "a profiled share is not what its fix saves: the profiler inflates small operators, and a fix can save more or less": (
            "profiler",
            "inflat",
            "estimate",
            "not a bound",
            "more than",
        ),
    },
)
