"""No end-of-lesson quiz can be scored without the lesson, by option length or by letter (issues 50, 51).

Before (aadfaf4), the right option was the strictly longest in 45 of the course's 55 questions as the
learner reads them (38 by the hook's parse below; lessons 1-3, 7, 10 and 11: every question): "pick
the longest" passed most quizzes unread. Here, over every lesson's
quiz as the learner reads it (the ``## ... Quiz`` markdown of ``solutions/lessonN/lessonN.py``, which
the released exercise carries) and its key (``grader/assignments/<lesson>/quiz_key.json``):

* every keyed question has options (a), (b), (c) and its key names one of them;
* the right option is the strictly longest in at most ``MAX_LONGEST`` of the course's questions and
  in at most half of any lesson's; and, so that the tell is not merely turned round, it is still the
  longest in at least ``MIN_LONGEST`` ("never the longest" would halve the odds) and the strictly
  shortest in at most ``MAX_SHORTEST``;
* no letter is right in more than ``MAX_LETTER`` of the course's questions.

The session hook (``before-stop``, section 5b') measures the same thing with a regex over the source;
``hook_measure`` repeats its parse, which runs the last question's last option on into the cell
marker below the markdown (so a last question keyed (c) counts as "longest" there), and the same
bounds hold for it too.
"""

import collections
import re
from pathlib import Path

import pytest

from grader import assignments
from grader.scoring import quiz

ROOT = Path(__file__).resolve().parents[1]
LETTERS = ("a", "b", "c")
MAX_LONGEST = 0.25  # of the course's questions whose right option is the strictly longest
MAX_LONGEST_IN_A_LESSON = 0.5
MIN_LONGEST = 0.10
MAX_SHORTEST = 0.35  # of the course's questions whose right option is the strictly shortest
MAX_LETTER = 0.35  # of the course's questions, for any one right letter


def lessons(root: Path = ROOT) -> list[str]:
    found = [p.parent.name for p in (root / "solutions").glob("lesson*/lesson*.py")]
    return sorted(found, key=lambda name: int(name.removeprefix("lesson")))


def quiz_markdown(text: str) -> list[str]:
    """The lines of the ``## ... Quiz`` markdown cell, without their ``# `` prefix."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if re.match(r"# ##+ .*Quiz\b", line))
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("#") or line.startswith("# %%"):
            break
        body.append(line[1:].strip())
    return body


def options(question: str) -> dict[str, str]:
    """letter -> option text (whitespace collapsed, trailing ``;``/``.`` dropped), as the hook reads them."""
    found = re.findall(r"\(([a-e])\)\s*(.*?)(?=\s*\([a-e]\)\s|$)", " ".join(question.split()))
    return {letter: text.rstrip(";. ") for letter, text in found}


def questions(text: str) -> dict[str, dict[str, str]]:
    """question id -> its options, from the quiz markdown."""
    parts = re.split(r"\n\s*(\d+)\.\s", "\n" + "\n".join(quiz_markdown(text)))
    return {f"q{parts[i]}": options(parts[i + 1]) for i in range(1, len(parts) - 1, 2)}


def quiz_key(lesson: str) -> dict[str, str]:
    return quiz.load_key(lesson)[0]


def strictly(lengths: dict[str, int], right: str, pick) -> bool:
    values = list(lengths.values())
    return lengths[right] == pick(values) and values.count(lengths[right]) == 1


def tells(quizzes: dict[str, tuple[dict[str, dict[str, str]], dict[str, str]]]) -> dict:
    """Per lesson and course-wide: how often the right option is the strictly longest / shortest,
    and the right letters. ``quizzes``: lesson -> (questions, key)."""
    out = {"lessons": {}, "longest": 0, "shortest": 0, "total": 0, "letters": collections.Counter()}
    for lesson, (qs, key) in quizzes.items():
        longest = shortest = 0
        for q, right in key.items():
            lengths = {letter: len(text) for letter, text in qs[q].items()}
            longest += strictly(lengths, right, max)
            shortest += strictly(lengths, right, min)
            out["letters"][right] += 1
        out["lessons"][lesson] = {"longest": longest, "shortest": shortest, "n": len(key)}
        out["longest"] += longest
        out["shortest"] += shortest
        out["total"] += len(key)
    return out


def problems(measured: dict) -> list[str]:
    """Each bound the measured quizzes break, in words (empty: none)."""
    total, found = measured["total"], []
    if measured["longest"] > MAX_LONGEST * total:
        found.append(f"right option strictly longest in {measured['longest']} of {total}")
    if measured["longest"] < MIN_LONGEST * total:
        found.append(f"right option strictly longest in only {measured['longest']} of {total}")
    if measured["shortest"] > MAX_SHORTEST * total:
        found.append(f"right option strictly shortest in {measured['shortest']} of {total}")
    for letter, n in sorted(measured["letters"].items()):
        if n > MAX_LETTER * total:
            found.append(f"({letter}) right in {n} of {total}")
    for lesson, m in measured["lessons"].items():
        if m["longest"] > MAX_LONGEST_IN_A_LESSON * m["n"]:
            found.append(f"{lesson}: right option strictly longest in {m['longest']} of {m['n']}")
    return found


def course(root: Path = ROOT, keys=None) -> dict:
    """lesson -> (questions, key) for every lesson with a quiz; ``keys`` defaults to the grader's."""
    return {
        lesson: (
            questions((root / "solutions" / lesson / f"{lesson}.py").read_text()),
            (keys or {}).get(lesson) or quiz_key(lesson),
        )
        for lesson in lessons(root)
    }


def hook_measure(root: Path = ROOT) -> dict:
    """The hook's own parse (``before-stop`` 5b'): each source's last ``QUIZ_ANSWERS`` is the key and
    the text from ``## Quiz`` up to it (cell markers included) holds the questions."""
    quizzes = {}
    for src in (root / "solutions").glob("lesson*/lesson*.py"):
        text = src.read_text()
        keys = list(re.finditer(r"QUIZ_ANSWERS\s*=\s*\{(.*?)\}", text, re.S))
        if not keys:
            continue
        answers = dict(re.findall(r"['\"](q\d+)['\"]\s*:\s*['\"]([a-e])['\"]", keys[-1].group(1)))
        start = text.find("## Quiz") if "## Quiz" in text else 0
        quiz = text[start : keys[-1].start()]
        body = "\n".join(
            line[1:].strip() if line.startswith("#") else "" for line in quiz.splitlines()
        )
        parts = re.split(r"\n\s*(\d+)\.\s", "\n" + body)
        qs = {f"q{parts[i]}": options(parts[i + 1]) for i in range(1, len(parts) - 1, 2)}
        quizzes[src.parent.name] = (
            qs,
            {q: a for q, a in answers.items() if len(qs.get(q, {})) > 1},
        )
    return tells(quizzes)


def test_every_question_offers_a_b_c_and_its_key_is_one_of_them():
    for lesson, (qs, key) in course().items():
        assert set(qs) == set(key), lesson
        for q, right in key.items():
            assert tuple(qs[q]) == LETTERS, (lesson, q, qs[q])
            assert all(len(text) >= 1 for text in qs[q].values()), (lesson, q)
            assert right in qs[q], (lesson, q, right)


def test_the_course_has_every_quiz():
    """Every lesson whose manifest scores a quiz is parsed, every keyed question with it (55 in
    the thirteen lessons of issues 50 and 51; a new lesson is counted from the registry)."""
    scored = {m.id for m in assignments.manifests() if "test_quiz" in m.points}
    assert set(course()) == scored
    assert tells(course())["total"] == sum(len(quiz_key(lesson)) for lesson in scored) >= 55


def test_the_bounds_reject_the_quizzes_issues_50_and_51_found():
    # the keys of aadfaf4 and a quiz whose right option is always the longest
    old = {
        "lesson1": "acbc",
        "lesson2": "bcab",
        "lesson3": "cabc",
        "lesson11": "bbacc",
    }
    quizzes = {
        lesson: (
            {
                f"q{i + 1}": {x: "x" * (40 if x == right else 20) for x in LETTERS}
                for i, right in enumerate(p)
            },
            {f"q{i + 1}": right for i, right in enumerate(p)},
        )
        for lesson, p in old.items()
    }
    found = problems(tells(quizzes))
    assert "right option strictly longest in 17 of 17" in found
    assert "lesson11: right option strictly longest in 5 of 5" in found
    one_letter = {
        "lessonX": (
            {"q1": {x: x for x in LETTERS}, "q2": {x: x for x in LETTERS}},
            {"q1": "b", "q2": "b"},
        )
    }
    assert "(b) right in 2 of 2" in problems(tells(one_letter))
    never_longest = {
        lesson: (
            {q: {x: "x" * (10 if x == right else 20) for x in LETTERS} for q, right in key.items()},
            key,
        )
        for lesson, (_, key) in quizzes.items()
    }
    assert "right option strictly longest in only 0 of 17" in problems(tells(never_longest))
    assert "right option strictly shortest in 17 of 17" in problems(tells(never_longest))


def test_no_quiz_is_scored_by_option_length_or_letter():
    measured = tells(course())
    assert problems(measured) == [], measured


def test_nor_as_the_session_hook_measures_it():
    measured = hook_measure()
    assert measured["total"] == tells(course())["total"]
    assert problems(measured) == [], measured


@pytest.mark.parametrize("lesson", lessons())
def test_the_released_exercise_carries_the_same_quiz(lesson):
    """The learner reads the quiz in exercises/: it is generated from the source, options and all."""
    import nbformat

    nb = nbformat.read(ROOT / "exercises" / lesson / f"{lesson}.ipynb", as_version=4)
    cell = next(
        c for c in nb.cells if c.cell_type == "markdown" and re.match(r"##+ .*Quiz\b", c.source)
    )
    released = questions(
        "\n".join(["# " + line if line else "#" for line in cell.source.split("\n")])
    )
    assert released == questions((ROOT / "solutions" / lesson / f"{lesson}.py").read_text())
