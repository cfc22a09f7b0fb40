"""What learner code may not replace: every clock and every function of effkit and grader modules.

``snapshot()`` before learner code runs, ``replaced(before)`` after: the names whose object changed.
Both worker kinds use it; a change is reported (the clock and the verdict live in the parent anyway).
"""

from __future__ import annotations

import sys
import time
import types

TIME_FUNCTIONS = (
    "perf_counter",
    "perf_counter_ns",
    "time",
    "time_ns",
    "monotonic",
    "monotonic_ns",
    "process_time",
)
WATCHED_PREFIXES = ("effkit", "grader")


def snapshot() -> dict[str, object]:
    """Identity of every clock and every function/class attribute of effkit and grader modules."""
    state: dict[str, object] = {f"time.{n}": getattr(time, n) for n in TIME_FUNCTIONS}
    for name, mod in list(sys.modules.items()):
        if not name.startswith(WATCHED_PREFIXES) or not isinstance(mod, types.ModuleType):
            continue
        state[f"sys.modules[{name}]"] = mod
        for attr, value in list(vars(mod).items()):
            if callable(value):
                state[f"{name}.{attr}"] = value
            if isinstance(value, type) and value.__module__ == name:
                # Resolve through the MRO (raw dict entries, so identities are stable): an override
                # *added* to a subclass (NaiveTrainer.evaluate) changes the resolved object too.
                resolved: dict[str, object] = {}
                for klass in reversed(value.__mro__[:-1]):
                    resolved.update(vars(klass))
                for cattr, cvalue in resolved.items():
                    if callable(cvalue) or isinstance(
                        cvalue, staticmethod | classmethod | property
                    ):
                        state[f"{name}.{attr}.{cattr}"] = cvalue
    return state


def replaced(before: dict[str, object]) -> list[str]:
    """Names whose object changed (or vanished) since ``before``."""
    after = snapshot()
    missing = object()
    return sorted(k for k, v in before.items() if after.get(k, missing) is not v)
