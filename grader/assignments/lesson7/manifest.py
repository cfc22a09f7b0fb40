"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson7",
    worker_modules=("probes",),
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
