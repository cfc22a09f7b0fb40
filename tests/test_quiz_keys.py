"""The end-of-exercise quiz keys give nothing away by their pattern (issue 42).

Before, lessons 1, 2, 7, 9 and 13 were all keyed bcab, 10 and 11 bcabc, 4 and 8 cbab, and "b" was
right in 29 of 55 questions: a learner who had seen one key could pass the others unread. Here,
over every assignment with a quiz: each lesson's pattern (its right letters in question order) is
its own and not one letter throughout, no letter is right in more than 40% of the course's
questions, the key file's ``why`` explains exactly the wrong options of each question, and the
instructor source's reference ``QUIZ_ANSWERS`` (``solutions/lessonN/lessonN.py``) and its quiz
markdown (each question with options (a), (b), (c)) agree with the key. The keys are data
(``grader/assignments/<lesson>/quiz_key.json``, closed to a cohort's learners), never code: no
``checks.py`` holds one, and each lesson's ``quiz_check`` asks exactly the key's questions.
"""

import ast
import importlib
import re
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from grader import assignments
from grader.scoring import quiz

ROOT = Path(__file__).resolve().parents[1]
LETTERS = ("a", "b", "c")
MAX_SHARE = 0.40  # of all the course's questions, for any one right letter

# the keys as issue 42 found them: the checks below must reject them
KEYS_OF_ISSUE_42 = {
    "lesson1": "bcab",
    "lesson2": "bcab",
    "lesson3": "babc",
    "lesson4": "cbab",
    "lesson5": "bbab",
    "lesson6": "acbb",
    "lesson7": "bcab",
    "lesson8": "cbab",
    "lesson9": "bcab",
    "lesson10": "bcabc",
    "lesson11": "bcabc",
    "lesson12": "bbabb",
    "lesson13": "bcab",
}


def _checks(lesson):
    return importlib.import_module(f"grader.assignments.{lesson}.checks")


def quiz_lessons() -> list[str]:
    """Every lesson with a quiz key file."""
    return [lesson for lesson in assignments.known() if quiz.key_file(lesson).is_file()]


def quiz_key(lesson: str) -> dict[str, str]:
    return quiz.load_key(lesson)[0]


def quiz_why(lesson: str) -> dict[str, dict[str, str]]:
    return quiz.load_key(lesson)[1]


def pattern(key: dict[str, str]) -> str:
    return "".join(key[q] for q in sorted(key, key=lambda q: int(q.removeprefix("q"))))


def shared_patterns(patterns: dict[str, str]) -> dict[str, list[str]]:
    """pattern -> the lessons keyed with it, for each pattern more than one lesson has."""
    by = {}
    for lesson, p in patterns.items():
        by.setdefault(p, []).append(lesson)
    return {p: sorted(ls) for p, ls in by.items() if len(ls) > 1}


def overused_letters(patterns: dict[str, str]) -> dict[str, str]:
    """letter -> "n of N" for each letter right in more than MAX_SHARE of all questions."""
    counts = Counter("".join(patterns.values()))
    total = sum(counts.values())
    return {x: f"{n} of {total}" for x, n in counts.items() if n > MAX_SHARE * total}


def one_letter_lessons(patterns: dict[str, str]) -> list[str]:
    return sorted(lesson for lesson, p in patterns.items() if len(set(p)) == 1)


def live_patterns() -> dict[str, str]:
    return {lesson: pattern(quiz_key(lesson)) for lesson in quiz_lessons()}


def source(lesson: str) -> str:
    return (ROOT / "solutions" / lesson / f"{lesson}.py").read_text()


def reference_answers(lesson: str) -> dict[str, str]:
    """``QUIZ_ANSWERS`` as the solution cell of the jupytext source assigns it."""
    text = source(lesson)
    cells = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", text, re.S)
    found = []
    for cell in cells:
        if "QUIZ_ANSWERS" not in cell:
            continue
        for node in ast.parse(textwrap.dedent(cell)).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "QUIZ_ANSWERS"
            ):
                found.append(ast.literal_eval(node.value))
    assert len(found) == 1, f"{lesson}: {len(found)} QUIZ_ANSWERS assignments in solution cells"
    return found[0]


def quiz_questions(lesson: str) -> dict[str, str]:
    """question id -> its text (stem and options, lines joined) from the ``## ... Quiz`` markdown."""
    lines = source(lesson).split("\n")
    start = next(i for i, line in enumerate(lines) if re.match(r"# ## .*Quiz\b", line))
    questions, current = {}, None
    for line in lines[start + 1 :]:
        if not line.startswith("#") or line.startswith("# %%"):
            break
        m = re.match(r"# (\d+)\. (.*)", line)
        if m:
            current = f"q{m.group(1)}"
            questions[current] = m.group(2)
        elif current and line.startswith("#    "):
            questions[current] += " " + line[5:].strip()
        else:
            current = None
    return questions


def test_the_checks_reject_the_keys_issue_42_found():
    assert shared_patterns(KEYS_OF_ISSUE_42) == {
        "bcab": ["lesson1", "lesson13", "lesson2", "lesson7", "lesson9"],
        "bcabc": ["lesson10", "lesson11"],
        "cbab": ["lesson4", "lesson8"],
    }
    assert overused_letters(KEYS_OF_ISSUE_42) == {"b": "29 of 55"}
    assert one_letter_lessons({"lessonX": "bbbb", "lessonY": "abab"}) == ["lessonX"]


def test_the_course_has_its_quizzes():
    """Every lesson keyed at issue 42 still has its quiz, and every lesson whose manifest scores a
    quiz has a key (a new lesson is counted from the registry, not added here)."""
    assert set(KEYS_OF_ISSUE_42) <= set(quiz_lessons())
    scored = {m.id for m in assignments.manifests() if "test_quiz" in m.points}
    assert set(quiz_lessons()) == scored


def test_every_lesson_has_its_own_answer_pattern():
    assert shared_patterns(live_patterns()) == {}


def test_no_letter_is_right_in_more_than_40_percent_of_the_questions():
    patterns = live_patterns()
    assert overused_letters(patterns) == {}, patterns
    assert set("".join(patterns.values())) == set(LETTERS)


def test_no_lesson_is_keyed_with_one_letter_throughout():
    assert one_letter_lessons(live_patterns()) == []


@pytest.mark.parametrize("lesson", quiz_lessons())
def test_quiz_why_explains_exactly_the_wrong_options(lesson):
    key, why = quiz_key(lesson), quiz_why(lesson)
    assert set(why) == set(key), lesson
    for q, right in key.items():
        assert right in LETTERS, (lesson, q, right)
        assert set(why[q]) == set(LETTERS) - {right}, (lesson, q)
        assert all(text.strip() for text in why[q].values()), (lesson, q)


@pytest.mark.parametrize("lesson", quiz_lessons())
def test_the_reference_answers_are_the_key(lesson):
    assert reference_answers(lesson) == quiz_key(lesson)


@pytest.mark.parametrize("lesson", quiz_lessons())
def test_the_quiz_markdown_asks_the_keyed_questions_with_three_options(lesson):
    questions = quiz_questions(lesson)
    assert set(questions) == set(quiz_key(lesson)), lesson
    for q, text in questions.items():
        marks = [text.find(f"({x}) ") for x in LETTERS]
        assert all(text.count(f"({x}) ") == 1 for x in LETTERS), (lesson, q, text)
        assert marks == sorted(marks), (lesson, q, text)


@pytest.mark.parametrize("lesson", quiz_lessons())
def test_the_key_is_data_and_the_checks_ask_its_questions(lesson):
    """The key left the checks module for its file (closed to a cohort's learners, who can read
    grader/): the module registers the quiz by its question ids alone, the same as the key's and
    the notebook's, and its source maps no question to an option any more."""
    check = _checks(lesson).CELL_CHECKS["test_quiz"]
    key = quiz_key(lesson)
    assert (check.lesson, check.questions) == (lesson, tuple(key)), lesson
    assert set(check.questions) == set(quiz_questions(lesson)) == set(reference_answers(lesson))
    text = (ROOT / "grader" / "assignments" / lesson / "checks.py").read_text()
    assert "QUIZ_KEY" not in text and "QUIZ_WHY" not in text, lesson
    for q, right in key.items():  # "q1": "c" in any spacing or quotes
        assert not re.search(rf"""["']{q}["']\s*:\s*["']{right}["']""", text), (lesson, q)
        assert not any(why in text for why in quiz_why(lesson)[q].values()), (lesson, q)


def test_no_checks_module_holds_a_quiz_key():
    """Any module under grader/assignments (learners read them all on a hub; manifests reach the
    worker's view too): none maps a question to a letter, not even one answer of a key."""
    literal = re.compile(r"""["']q\d+["']\s*:\s*["'][abc]["']""")
    found = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "grader" / "assignments").rglob("*.py")
        if literal.search(p.read_text())
    }
    assert sorted(found) == []
    assert len(quiz_lessons()) >= 14  # every lesson's quiz has its key file
