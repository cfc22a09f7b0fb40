"""End-of-lesson quizzes, graded in the parent like any other check.

The learner answers ``QUIZ_ANSWERS = {"q1": "b", ...}`` in a solution cell; the worker's
``probe_quiz`` (:mod:`grader.kit.worker`) returns the answers as short strings; ``quiz_check(key, why)``
compares them with the key, which lives in the lesson's grader package, and says why each wrong
option is wrong. The course is open source: a quiz checks understanding, it is not an exam.
"""

from __future__ import annotations

from collections.abc import Callable

from grader.scoring.checks import Context, expect, stub_reason


def quiz_feedback(
    key: dict[str, str], answers: dict[str, str], why: dict[str, dict[str, str]] | None = None
) -> list[str]:
    """One line per wrong answer: the question, the option chosen and why it is wrong."""
    lines = []
    for q, right in key.items():
        chosen = str(answers.get(q, "")).strip().lower()
        if chosen == right:
            continue
        if not chosen:
            lines.append(f"{q}: no answer")
            continue
        reason = (why or {}).get(q, {}).get(chosen)
        lines.append(
            f"{q}: ({chosen}) — {reason}"
            if reason
            else f"{q}: ({chosen}) is not the best choice; revisit it"
        )
    return lines


def quiz_check(
    key: dict[str, str], why: dict[str, dict[str, str]] | None = None
) -> Callable[[Context], None]:
    """Parent side: a cell check that passes when every answer matches ``key``; a wrong answer
    gets ``why[question][option]`` as its feedback."""

    def check_quiz(ctx: Context) -> None:
        r = ctx.session.call("quiz", 30)
        stub = [e for e in ctx.session.load_errors if e.get("cell") == "quiz"]
        expect(
            r.ok,
            stub_reason(stub[0]["message"] if stub else r.failure)
            or f"reading QUIZ_ANSWERS {r.failure}",
        )
        answers = r.data.get("answers", {})
        wrong = quiz_feedback(key, answers, why)
        expect(
            not wrong, f"{len(key) - len(wrong)} of {len(key)} answers right. " + "; ".join(wrong)
        )
        ctx.ok(f"all {len(key)} answers right")

    return check_quiz
