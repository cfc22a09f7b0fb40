"""Lesson 12, worker side: the learner's search policy, asked for configurations and stop decisions.

Only JSON crosses back (a configuration the parent validates, a stop bool); nothing is trained or
scored here.
"""

from __future__ import annotations

import json

from grader.kit.worker import probe_quiz  # noqa: F401  (the worker finds probes by name)


def _plain(value):
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        if isinstance(
            value, dict
        ):  # name the culprit: a numpy int from np.random.choice is the usual one
            for key, item in value.items():
                try:
                    json.dumps(item, allow_nan=False)
                except (TypeError, ValueError):
                    return {"not_json": f"{str(key)[:40]} = {type(item).__name__}"}
        return {"not_json": type(value).__name__}


def probe_start(worker, space: dict, budget: int, max_epochs: int, seed: int):
    cls = worker.ns.get("Search")
    if not callable(cls):
        raise NameError("your solution cells define no class 'Search'")
    worker.search = cls(space=space, budget=budget, max_epochs=max_epochs, seed=seed)
    return {"started": True}, []


def _search(worker):
    search = getattr(worker, "search", None)
    if search is None:
        raise RuntimeError(
            "the search was not started (Search(...) raised or the worker restarted)"
        )
    return search


def probe_ask(worker, trial: int):
    config = _search(worker).ask(trial)
    return {"config": None if config is None else _plain(config)}, []


def probe_report(worker, trial: int, epoch: int, score: float):
    return {"stop": bool(_search(worker).report(trial, epoch, score))}, []
