"""Lesson 7, worker side: the learner's batch sampler on the grader's lengths, answers as JSON.

Anything that is not a list of int lists goes back as its type name; the parent judges.
"""

from __future__ import annotations

import numbers

from grader.kit.worker import probe_quiz  # noqa: F401  (the worker finds probes by name)

MAX_INDICES = 200_000  # per answer: far above any request; a runaway answer is cut and refused


def _plain(answer) -> list | str:
    try:
        batches = list(answer)
        out, count = [], 0
        for batch in batches:
            row = [
                int(i) if isinstance(i, numbers.Integral) and not isinstance(i, bool) else None
                for i in batch
            ]
            count += len(row)
            if None in row or count > MAX_INDICES:
                return f"not a list of index lists ({type(answer).__name__} holding {type(batch).__name__})"
            out.append(row)
        return out
    except TypeError:
        return f"not a list of index lists ({type(answer).__name__})"


def probe_batches(worker, requests: list):
    fn = worker.ns.get("bucket_batches")
    if not callable(fn):
        raise NameError("your solution cells define no function 'bucket_batches'")
    answers = []
    for req in requests:
        answer = fn(
            list(req["lengths"]),
            batch_size=req.get("batch_size"),
            max_tokens=req.get("max_tokens"),
            seed=req["seed"],
            epoch=req["epoch"],
        )
        answers.append(_plain(answer))
    return {"answers": answers}, []
