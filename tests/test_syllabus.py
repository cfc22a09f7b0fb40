from pathlib import Path

from effkit import syllabus

ROOT = Path(__file__).resolve().parents[1]


def test_syllabus_numbers_its_lessons_in_order_and_ready_ones_exist():
    assert [lesson.number for lesson in syllabus.LESSONS] == list(
        range(1, len(syllabus.LESSONS) + 1)
    )
    assert len({lesson.slug for lesson in syllabus.LESSONS}) == len(syllabus.LESSONS)
    for lesson in syllabus.ready():
        assert (ROOT / "notebooks" / lesson.notebook).exists(), lesson
        assert (ROOT / "solutions" / lesson.assignment / f"{lesson.assignment}.ipynb").exists()
    assert syllabus.by_assignment("lesson2").slug == "02_feed_the_accelerator"
