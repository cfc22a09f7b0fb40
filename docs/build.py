"""Build the course site: syllabus page + the lessons with their executed outputs (static HTML).

    python docs/build.py [--executed DIR | --run] [--out DIR]

By default a lesson's page shows its recorded ``cpu`` run (``docs/recorded/``, made with
``python -m effkit.lesson record``; the page opens with how and when it was recorded, and says so
when the source changed since), and a lesson without one is run first (in ``$EFFKIT_PROFILE``:
``cpu`` on a CPU, minutes per lesson). ``--run`` runs every lesson; ``--executed DIR`` takes the
executed notebooks found there (the test suite hands over the ones it already ran, so CI runs each
lesson once).
Sphinx + myst-nb + sphinx-book-theme build offline. The site lands in ``docs/_build/html``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

from effkit import lesson_record  # noqa: E402
from effkit.lesson_build import NOTEBOOKS, execute, syllabus_table  # noqa: E402
from effkit.syllabus import ready  # noqa: E402

INDEX_HEAD = """# effkit — efficient deep-learning training

An open, autograded course: each lesson measures a naive training recipe, changes one thing,
and proves with A/B measurements (medians, intervals with their real coverage) what it gained.
The pages below show the lessons as executed; run them yourself with `make lab`. The exercises
and their quizzes are graded with `python -m grader check`.

## Syllabus

"""

TOC = """

```{{toctree}}
:hidden:
:caption: Lessons

{entries}
```
"""


def _recorded_page(slug: str, dest: Path) -> None:
    import nbformat

    nb = lesson_record.with_outputs(
        NOTEBOOKS / f"{slug}.ipynb", lesson_record.RECORDED / f"{slug}.outputs.json"
    )
    nb.cells.insert(
        1, nbformat.v4.new_markdown_cell(lesson_record.banner(slug))
    )  # below the title cell
    nbformat.write(nb, dest)


def build(executed: Path | None, out: Path, run_all: bool = False) -> Path:
    src = DOCS / "_src"
    shutil.rmtree(src, ignore_errors=True)
    (src / "lessons").mkdir(parents=True)
    shutil.copy(DOCS / "conf.py", src / "conf.py")
    for lesson in ready():
        if executed is None and not run_all and lesson_record.state(lesson.slug) != "missing":
            _recorded_page(lesson.slug, src / "lessons" / lesson.notebook)
            print(f"{lesson.slug}: recorded run ({lesson_record.state(lesson.slug)})", flush=True)
        elif executed is None:
            path, wall_s = execute(lesson.slug, src / "lessons")
            print(f"executed {lesson.slug} in {wall_s:.0f} s", flush=True)
        else:
            path = executed / lesson.notebook
            if not path.is_file():
                raise SystemExit(f"{path} is missing: run the lessons first, or drop --executed")
            shutil.copy(path, src / "lessons" / lesson.notebook)
    entries = "\n".join(f"lessons/{lesson.slug}" for lesson in ready())
    index = (
        INDEX_HEAD
        + syllabus_table(lambda slug: f"lessons/{slug}.ipynb")
        + TOC.format(entries=entries)
    )
    (src / "index.md").write_text(index)
    html = out / "html"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-b",
            "html",
            "-q",
            "-W",
            "--keep-going",
            str(src),
            str(html),
        ],
        check=True,
    )
    print(f"site: {html / 'index.html'}")
    return html


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executed", type=Path, help="folder of already executed lessons")
    parser.add_argument("--run", action="store_true", help="run every lesson, recorded or not")
    parser.add_argument("--out", type=Path, default=DOCS / "_build")
    args = parser.parse_args()
    build(args.executed, args.out, run_all=args.run)


if __name__ == "__main__":
    main()
