"""End-of-lesson quizzes, graded out of the kernel like any other check.

**What it does.** The exercise notebook asks 3-5 multiple-choice questions; the learner answers in
a solution cell, ``QUIZ_ANSWERS = {"q1": "b", ...}``. ``probe_quiz`` (run in the sandboxed worker)
returns those answers as short plain strings and nothing else; ``quiz_check(key)`` (run in the
parent) compares them with the key, which lives in the assignment's grader module and never in the
notebook, and names the questions to revisit.

**When to use it.** Any assignment: re-export ``probe_quiz`` from its probes module, add
``"test_quiz": quiz_check(KEY)`` to its ``CELL_CHECKS``, and a ``quiz`` solution cell plus a
locked ``test_quiz`` cell to its source.

**Pitfalls.** The course is open source, so a determined learner can read any key in the grader's
code; a quiz checks understanding, it is not an exam.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the parent's side only: workers import probe_quiz without nbformat (~1.5 s)
    from grader.cells import Context

QUIZ_CELL = "quiz"  # grade id of the solution cell holding QUIZ_ANSWERS


def probe_quiz(worker):
    """Worker side: the learner's quiz answers (question -> choice), as short plain strings."""
    answers = worker.ns.get("QUIZ_ANSWERS")
    if not isinstance(answers, dict):
        raise NameError("your solution cells define no QUIZ_ANSWERS dict")
    return {"answers": {str(k)[:20]: str(v)[:20] for k, v in list(answers.items())[:20]}}, []


def quiz_check(key: dict[str, str], feedback: dict[str, dict[str, str]] | None = None
               ) -> Callable[[Context], None]:
    """Parent side: a cell check that passes when every answer matches ``key``.

    ``feedback`` (question -> choice -> one sentence) says why a wrong choice is wrong, so a
    learner who picked it learns something rather than only which question to revisit.
    """

    from grader.cells import expect, stub_reason

    def check_quiz(ctx: Context) -> None:
        r = ctx.session.call("quiz", 30)
        stub = [e for e in ctx.session.load_errors if e.get("cell") == "quiz"]
        expect(r.ok, stub_reason(stub[0]["message"] if stub else r.failure)
               or f"reading QUIZ_ANSWERS {r.failure}")  # fmt: skip
        answers = r.data.get("answers", {})
        chosen = {q: str(answers.get(q, "")).strip().lower() for q in key}
        wrong = [q for q in key if chosen[q] != key[q]]
        why = [f"{q} ({chosen[q] or 'no answer'}): {(feedback or {}).get(q, {})[chosen[q]]}"
               for q in wrong if chosen[q] in (feedback or {}).get(q, {})]
        expect(not wrong, f"{len(key) - len(wrong)} of {len(key)} answers right; revisit "
                          + ", ".join(wrong) + ("" if not why else ". " + " ".join(why)))  # fmt: skip
        ctx.ok(f"all {len(key)} answers right")

    return check_quiz
