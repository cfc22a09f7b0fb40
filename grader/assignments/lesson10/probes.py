"""Lesson 10, worker side: the learner's ``diagnose(profile)`` on plain profile data, one label per case.

**What it does.** ``probe_diagnose(profiles)`` calls the learner's ``diagnose`` on each profile (a
JSON dict the parent measured: per-range times, operator counts, syncs, dtypes, padding share ...)
and returns one short string per case: the label, or why there is none ("raised ...", "returned
<type>"). Nothing is profiled here and nothing is judged here: the parent planted the bottlenecks,
profiled the steps itself and compares the labels with what it planted.

**When to use it.** Named as lesson 10's probe module; run in :mod:`grader.probe_worker`.

**Expected gain.** A learner's diagnosis that never sees a model, a clock or the planted answer.

**Pitfalls.** Everything returned is a claim: a label is cut to ``MAX_LABEL`` characters here and
checked against the known labels by the parent; each call gets a fresh copy of its profile, so a
``diagnose`` that edits its input cannot change the next case.
"""

from __future__ import annotations

import copy

from grader.quiz import probe_quiz  # noqa: F401  (the worker finds probes by name)

MAX_LABEL = 40


def probe_diagnose(worker, profiles: list):
    fn = worker.ns.get("diagnose")
    if not callable(fn):
        raise NameError("your solution cells define no function 'diagnose'")
    labels = []
    for profile in profiles[:64]:
        try:
            label = fn(copy.deepcopy(profile))
        except NotImplementedError:
            raise
        except Exception as err:  # noqa: BLE001  (one case's failure, reported as that case's answer)
            labels.append(f"raised {type(err).__name__}"[:MAX_LABEL])
            continue
        # str.__getitem__: a plain str even from a str subclass with its own methods
        labels.append(str.__getitem__(label, slice(0, MAX_LABEL)) if isinstance(label, str)
                      else f"returned {type(label).__name__}"[:MAX_LABEL])  # fmt: skip
    return {"labels": labels}, []
