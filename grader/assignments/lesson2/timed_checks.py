"""Lesson 2, parent side: what the *timed* run's pipeline fed the trainer, judged as the probes are
(:mod:`grader.kit.batch_judge`). Parent only: not in the worker's view of the repository.
"""

from __future__ import annotations

from grader.kit.batch_judge import (  # noqa: F401  (re-exported: tests/test_timed_batches.py)
    EpochLedger,
    RunImages,
    chunk_steps,
    judge,
    reference_batches,
)


class ChunkJudge:
    """The protocol's judge for one grading: ``judge(r, c, kept, role)`` -> problems with the batches
    timed chunk ``c`` of run ``r`` trained on (``data``: lesson 2's ``GraderData``; both sides
    train the same batch size, so ``role`` changes nothing here)."""

    def __init__(self, data):
        self.data, self.runs, self.ledgers = data, {}, {}

    def __call__(self, r: int, c: int, kept: dict, role: str = "learner") -> list[str]:
        data = self.data
        if r not in self.runs:
            images, labels = data.run_sets[r]
            bs = data.trainers[r].cfg.batch_size
            reference = reference_batches(images, labels, bs, data.device, data.seeds[r])
            self.runs[r] = (RunImages(images, labels), bs, reference)
        run, bs, reference = self.runs[r]
        steps = chunk_steps(data.spec, len(run.images), bs, c)
        # the learner's every chunk comes here in order (the baseline's drawn ones only): its ledger
        # checks an epoch across chunks (no image twice, crops and flips drawn afresh)
        ledger = None
        if role == "learner":
            ledger = self.ledgers.setdefault(r, EpochLedger(len(run.images)))
        return judge(run, kept, steps, bs, reference, ledger)
