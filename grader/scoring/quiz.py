"""End-of-lesson quizzes, graded in the parent like any other check.

The learner answers ``QUIZ_ANSWERS = {"q1": "b", ...}`` in a solution cell; the worker's
``probe_quiz`` (:mod:`grader.kit.worker`) returns the answers as short strings; the lesson's
``quiz_check(lesson, questions)`` compares them with the key and says why each wrong option is
wrong.

The key and those reasons are data, not code: ``grader/assignments/<lesson>/quiz_key.json``
(``{"key": {question: option}, "right": {question: the author's note on why}, "why": {question:
{wrong option: reason}}}``; ``right`` is never shown), read by the check when it grades, never at
import. On a cohort hub the file is closed to learners (:mod:`grader.frontends.cohort_host`) while
the rest of ``grader/`` stays readable (their Validate runs it): there the check cannot read the
key, names the questions with no answer and otherwise fails with :data:`SEALED` (no points, never a
pass), which Validate turns into "every question has an answer". Autograde (root's grading service,
the instructor's ``python -m grader check``) reads the key. The course is open source and its public
repository holds the keys: a quiz checks understanding, it is not an exam (a cohort that wants
secret keys edits its copy's files).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from grader.scoring.checks import CheckFailed, Context, expect, stub_reason

KEY_FILE = "quiz_key.json"
ASSIGNMENTS_DIR = Path(__file__).resolve().parents[1] / "assignments"
# what the check says where it cannot read the key; Validate (grader.kit.in_notebook) looks for it
SEALED = "the quiz key is sealed on this machine"


def key_file(lesson: str) -> Path:
    return ASSIGNMENTS_DIR / lesson / KEY_FILE


def load_key(lesson: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """``lesson``'s key (question -> right option) and why-text (question -> wrong option -> why).

    Raises PermissionError where the file is closed to this account (a cohort's learners), which
    the check reports as sealed; a missing or malformed file is a grader bug and raises as such."""
    path = key_file(lesson)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} is missing: {lesson}'s quiz cannot be graded without its key (the grader's "
            "copy is incomplete; restore the file from the course repository)"
        ) from None
    data = json.loads(text)
    key = data.get("key") if isinstance(data, dict) else None
    if not (isinstance(key, dict) and key and all(isinstance(o, str) for o in key.values())):
        key = {}

    def by_question(name: str, fits) -> bool:  # an optional table of the key's questions
        table = data.get(name, {}) if key else None
        return isinstance(table, dict) and all(q in key and fits(v) for q, v in table.items())

    if not (
        by_question("right", lambda note: isinstance(note, str))
        and by_question(
            "why", lambda w: isinstance(w, dict) and all(isinstance(t, str) for t in w.values())
        )
    ):
        raise ValueError(
            f'{path} is malformed: it holds {{"key": {{question: option}}, "right": '
            '{question: note}, "why": {question: {option: reason}}}'
        )
    return key, data.get("why", {})


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


def quiz_check(lesson: str, questions: tuple[str, ...]) -> Callable[[Context], None]:
    """Parent side: a cell check that passes when every answer matches ``lesson``'s key (read from
    its ``quiz_key.json`` when it grades); a wrong answer gets the key's why-text as its feedback.
    ``questions``: the quiz's question ids, enough to name the unanswered ones without the key."""
    questions = tuple(questions)

    def check_quiz(ctx: Context) -> None:
        r = ctx.session.call("quiz", 30)
        stub = [e for e in ctx.session.load_errors if e.get("cell") == "quiz"]
        expect(
            r.ok,
            stub_reason(stub[0]["message"] if stub else r.failure)
            or f"reading QUIZ_ANSWERS {r.failure}",
        )
        answers = r.data.get("answers", {})
        try:
            key, why = load_key(lesson)
        except PermissionError:
            unanswered = [q for q in questions if not str(answers.get(q, "")).strip()]
            expect(
                not unanswered,
                f"{len(questions) - len(unanswered)} of {len(questions)} questions answered; "
                f"{SEALED}, so answers are graded at autograde. "
                + "; ".join(f"{q}: no answer" for q in unanswered),
            )
            raise CheckFailed(
                f"all {len(questions)} questions answered; {SEALED} ({KEY_FILE} is closed to this "
                "account), so whether they are right is graded at autograde: no points here"
            ) from None
        if set(key) != set(questions):
            raise ValueError(
                f"{key_file(lesson)} grades {sorted(key)}, "
                f"but {lesson}'s quiz asks {list(questions)}"
            )
        wrong = quiz_feedback(key, answers, why)
        expect(
            not wrong, f"{len(key) - len(wrong)} of {len(key)} answers right. " + "; ".join(wrong)
        )
        ctx.ok(f"all {len(key)} answers right")

    check_quiz.lesson, check_quiz.questions = lesson, questions  # for the tests and the docs
    return check_quiz
