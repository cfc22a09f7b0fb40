"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson3",
    worker_modules=("probes", "amp_checks", "runtime", "text_data"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 14.0/14.0, the untouched stub 0/14.0
    reference_grading_s=219,
    stub_grading_s=29,
    points={"test_policy": 2, "test_step": 2, "test_scaler": 3, "test_speed": 5, "test_quiz": 2},
    timed_tests=("test_lesson3_exercise.py",),  # its tests time something: the timed lane
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "on devices with 16-bit matmul units (AMX on the recorded CPU, tensor cores on the H100) 16 bits paid for the wide matmuls; no device without such units was measured": (
            "tensor core",
            "amx",
            "16 bit unit",
            "bf16 unit",
            "native",
        ),
        "whether 16 bits paid depended on the matmul's width: the sweep's verdicts say at which widths": (
            "width",
            "larger",
            "bigger",
            "wider",
            "size",
        ),
        "why a small matmul gained little or lost was not measured: the A/Bs timed whole passes; a profiler's kernel times would say": (
            "not measure",
            "profiler",
            "kernel time",
            "lesson 10",
            "whole pass",
        ),
    },
)
