"""The course's lessons, in one place.

Every other place that names a lesson — the lesson sources in ``notebooks/``, the exercise
assignments in ``solutions/`` and the grader, the site's syllabus page, the tests — reads it from
here, so a rename happens once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lesson:
    number: int
    slug: str  # file stem of the lesson: notebooks/<slug>.py -> notebooks/<slug>.ipynb
    title: str
    status: str  # "ready" (lesson + exercise graded), "planned"
    assignment: str  # nbgrader assignment id: solutions/<assignment>/<assignment>.ipynb

    @property
    def notebook(self) -> str:
        return f"{self.slug}.ipynb"


def _lesson(number: int, slug: str, title: str, status: str = "planned") -> Lesson:
    return Lesson(number, f"{number:02d}_{slug}", title, status, f"lesson{number}")


LESSONS: tuple[Lesson, ...] = (
    _lesson(1, "measure_first", "Measure first", "ready"),
    _lesson(2, "feed_the_accelerator", "Feed the accelerator: the input pipeline", "ready"),
    _lesson(3, "mixed_precision", "Mixed precision", "ready"),
    _lesson(4, "bigger_batches", "Bigger batches, safely: accumulation and LR scaling", "ready"),
    _lesson(5, "activation_checkpointing", "Memory for compute: activation checkpointing", "ready"),
    _lesson(6, "never_lose_a_run", "Schedules, early stopping and checkpoint/resume", "ready"),
    _lesson(7, "dynamic_padding", "Dynamic padding and length bucketing", "ready"),
    _lesson(8, "peft_lora", "Parameter-efficient fine-tuning: LoRA", "ready"),
    _lesson(9, "distillation", "Knowledge distillation", "ready"),
    _lesson(10, "profiling", "Profiling: find the next bottleneck", "ready"),
    _lesson(11, "ddp_zero", "Data parallelism: DDP and ZeRO/FSDP", "ready"),
    _lesson(12, "hpo_on_a_budget", "Hyperparameter search on a budget", "ready"),
    _lesson(13, "quantized_inference", "Quantized inference under a latency SLO", "ready"),
    _lesson(14, "capstone", "The capstone speedrun: lessons 1-4 on one recipe", "ready"),
)


def ready() -> tuple[Lesson, ...]:
    """The lessons that exist today (lesson notebook and graded exercise)."""
    return tuple(lesson for lesson in LESSONS if lesson.status == "ready")


def by_assignment(assignment: str) -> Lesson:
    for lesson in LESSONS:
        if lesson.assignment == assignment:
            return lesson
    raise KeyError(
        f"no lesson has assignment {assignment!r}; known: "
        f"{', '.join(lesson.assignment for lesson in LESSONS)}"
    )
