"""nbgrader configuration for the effkit course (nbgrader 0.9).

Layout (all relative to the course root, `$EFFKIT_COURSE_ROOT` or this repository):
    solutions/<assignment>/   nbgrader *source* notebooks (instructors)
    exercises/<assignment>/   *release* notebooks, generated: `nbgrader generate_assignment lesson2 --force`
    course/                   private, git-ignored ($EFFKIT_COURSE_DIR): submitted/, autograded/,
                              feedback/, gradebook.db, exchange/, grader_targets.json (overrides)

Every graded cell is graded out of the kernel, in this (nbgrader's) process: `GradeCells` (correctness,
learner code in sandboxed workers) and `GradePerformance` (timed cells). The learner's notebook is not
executed for assignments that declare cell checks (all three), see grader/README.md.
"""

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

ROOT = Path(os.environ.get("EFFKIT_COURSE_ROOT") or Path(__file__).resolve().parent).resolve()
COURSE = os.environ.get("EFFKIT_COURSE_DIR", "course")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # so nbgrader can import `grader`
(ROOT / COURSE).mkdir(parents=True, exist_ok=True)  # sqlite cannot create the gradebook's folder

c.CourseDirectory.course_id = "effkit"
c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
# solutions/<id>/<id>.py is the exercise's text source, solutions included (grader/frontends/sources.py):
# nbgrader copies every other file of the source folder into the release, so never these.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "lesson*.py"]
c.CourseDirectory.submitted_directory = f"{COURSE}/submitted"
c.CourseDirectory.autograded_directory = f"{COURSE}/autograded"
c.CourseDirectory.feedback_directory = f"{COURSE}/feedback"
c.CourseDirectory.solution_directory = f"{COURSE}/released_solutions"
c.CourseDirectory.db_url = f"sqlite:///{ROOT / COURSE / 'gradebook.db'}"
# Not /srv/nbgrader: no root rights needed. nbgrader never creates the exchange itself: without it a
# learner's Assignments list says "The exchange directory does not exist" until the first release.
# A cohort on JupyterHub shares one exchange between users instead (EFFKIT_EXCHANGE, grader/cohort).
EXCHANGE = Path(os.environ.get("EFFKIT_EXCHANGE") or ROOT / COURSE / "exchange")
EXCHANGE.mkdir(parents=True, exist_ok=True)
c.Exchange.root = str(EXCHANGE)
# Collect refuses a submission filed under another learner's name (nbgrader 0.9 only warns, then
# collects it over the real learner's work): grader/frontends/exchange.py
c.ExchangeFactory.collect = "grader.frontends.exchange.OwnedCollect"

# Learners get a stub that fails loudly until they write their code.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Per-cell execution limit, by assignment. Training happens in the grader's own processes (the
# performance cell only prints a note under autograding), so notebook cells are short: building
# the naive recipe and the correctness checks. The limit is taken from the assignment named on the
# command line (`nbgrader autograde lesson2`), else the default.
CELL_TIMEOUT_S = {"lesson1": 180, "lesson2": 120, "lesson3": 120, "lesson4": 120}
_named = [a for a in sys.argv[1:] if a in CELL_TIMEOUT_S]
c.Execute.timeout = CELL_TIMEOUT_S[_named[0]] if _named else 300
c.Execute.interrupt_on_timeout = True  # a stuck cell scores 0; the following cells still run

# Screening before nbgrader reads a submission (a file that is not a notebook, another lesson's
# notebook): the one-line reason `python -m grader autograde` gives, in formgrader and the feedback.
c.Autograde.exporter_class = "grader.frontends.nbgrader_screen.ScreeningExporter"

# Out-of-kernel grading: Execute is skipped for assignments graded entirely by the grader (the
# learner's notebook never runs under autograde); GradeCells then writes every graded cell's
# outputs, GradePerformance the timed cell's. All of it before nbgrader reads the scores.
c.Autograde.autograde_preprocessors = [
    "grader.frontends.nbgrader_screen.ScreenSubmission",  # graded cells missing from a resubmission
    "grader.frontends.nbgrader_plugin.ExecuteUnlessOutOfKernel",
    "grader.frontends.nbgrader_plugin.GradeCells",
    "grader.frontends.nbgrader_plugin.GradePerformance",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# `python -m grader farm` records its results through nbgrader (the gradebook has one writer, the
# farm's driver): the verdicts come from the farm's signed ledger instead of grading here.
if os.environ.get("EFFKIT_FARM_VERDICTS"):
    c.Autograde.autograde_preprocessors = [
        "grader.frontends.nbgrader_farm.FarmVerdicts"
        if p.endswith(".ExecuteUnlessOutOfKernel")
        else p
        for p in c.Autograde.autograde_preprocessors
        if not p.endswith((".GradeCells", ".GradePerformance"))
    ]

# A cohort's formgrader runs as an unprivileged grader account and never grades: the root grading
# service does (grader/frontends/grading_service.py) and signs each grading, which ServiceVerdicts
# checks before writing its verdicts; no learner code runs in this process.
if os.environ.get("EFFKIT_GRADING_SOCKET"):
    c.Autograde.autograde_preprocessors = [
        "grader.frontends.nbgrader_service.ServiceVerdicts"
        if p.endswith(".ExecuteUnlessOutOfKernel")
        else p
        for p in c.Autograde.autograde_preprocessors
        if not p.endswith((".GradeCells", ".GradePerformance"))
    ]

# Formgrader / labextension behind a proxy: scope the cookie to the whole site.
c.IdentityProvider.cookie_options = {"path": "/"}
