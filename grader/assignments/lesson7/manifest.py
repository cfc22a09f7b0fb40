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
)
