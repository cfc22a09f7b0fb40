"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson12",
    worker_modules=("probes",),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 9.0/9.0, the untouched stub 0/9.0 (it fails at its first call, no grid). Since
    # each grading searches a pair of tasks (issue 50), the reference: 309 s wall on the 2-core AMX
    # Xeon shared at load ~6 (17% of a core), 31 s at load 1, 9.0/9.0 both, 2026-12-06
    reference_grading_s=309,
    stub_grading_s=44,
    points={"test_search": 4, "test_pruning": 3, "test_quiz": 2},
    clocked=False,  # graded on counts (bytes, epochs, memory), not on a clock
    # text of the reference answers the released notebook must not hold (tests/test_exercises.py)
    released_without=("self.study.tell(t, score)",),
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "pruning stops weak trials after a few epochs, and the seconds saved pay for more trials": (
            "weak",
            "bad",
            "poor",
            "saved",
            "more trials",
        ),
        "an early score can mispredict the final one, so a slow starter may be pruned": (
            "slow",
            "late",
            "mispredict",
            "early score",
            "wrong",
        ),
        "one run per trial: differences smaller than the seed-to-seed spread name no winner": (
            "spread",
            "overlap",
            "variance",
            "interval",
            "chance",
        ),
        "the batch size is held fixed, not tuned on validation (it governs speed); the learning rate is a nuisance": (
            "throughput",
            "nuisance",
            "not tuned",
            "speed",
            "re-tun",
        ),
    },
)
