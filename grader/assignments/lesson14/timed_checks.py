"""Lesson 14, parent side: what each side's timed run trained on, judged by :mod:`grader.kit.batch_judge`.

The learner's recipe may change the batch size: its chunks are judged at its own (the parent read
it from the notebook's text, ``spec.learner_hooks``), the baseline's at the naive recipe's.
Parent only: not in the worker's view of the repository.
"""

from __future__ import annotations

from grader.kit.batch_judge import EpochLedger, RunImages, chunk_steps, judge, reference_batches


class ChunkJudge:
    """``judge(r, c, kept, role)`` -> problems with the batches timed chunk ``c`` of run ``r`` of
    ``role`` trained on (``data``: lesson 14's ``GraderData``)."""

    def __init__(self, data):
        self.data, self.runs, self.ledgers = data, {}, {}

    def __call__(self, r: int, c: int, kept: dict, role: str = "learner") -> list[str]:
        data = self.data
        bs = data.trainers[r].cfg.batch_size
        if role == "learner":
            bs = data.spec.learner_hooks.get("batch_size", bs)
        if (r, bs) not in self.runs:
            images, labels = data.run_sets[r]
            reference = reference_batches(images, labels, bs, data.device, data.seeds[r])
            self.runs[r, bs] = (RunImages(images, labels), reference)
        run, reference = self.runs[r, bs]
        # the learner's every chunk comes here in order (the baseline's drawn ones only): its ledger
        # checks an epoch across chunks (no image twice, crops and flips drawn afresh)
        ledger = None
        if role == "learner":
            ledger = self.ledgers.setdefault(r, EpochLedger(len(run.images)))
        steps = chunk_steps(data.spec, len(run.images), bs, c)
        return judge(run, kept, steps, bs, reference, ledger)
