"""Screening submissions before nbgrader grades them: what cannot be graded, and why.

A submission that is not a notebook, is far too large, or is another lesson's notebook is left out
of nbgrader's run, so the gradebook keeps what it held for that learner (scores, submission time)
and ``autograded/`` its notebook; nbgrader alone would fail with a traceback or, for a notebook
without the lesson's cells, "grade" it silently with the earlier scores. Each reason is one line
saying what is wrong and what to do. Byte-identical submissions are noted (possible copying), never penalised.
"""

from __future__ import annotations

import hashlib
import html
import shutil
from pathlib import Path

from grader.common import course
from grader.frontends.notebook import NotebookError, nbgrader_meta, read_notebook

# A lesson notebook is ~15 kB without outputs; plots and logs add a few MB at most. Anything
# larger is not read (nbgrader would load all of it into memory, per learner).
MAX_NOTEBOOK_BYTES = 32 * 2**20


def _resubmit(assignment_id: str) -> str:
    return (
        f"ask the learner to submit {assignment_id} again; `nbgrader collect --update` picks it up"
    )


def grade_ids(nb) -> set[str]:
    """The nbgrader ``grade_id``s a notebook's cells carry."""
    return {nbgrader_meta(c)["grade_id"] for c in nb.cells if "grade_id" in nbgrader_meta(c)}


def source_ids(root: Path | None = None) -> dict[str, set[str]]:
    """Every assignment's ``grade_id``s, from the source notebooks ``solutions/<id>/<id>.ipynb``."""
    out = {}
    for path in sorted(((root or course.course_root()) / course.SOURCE_DIR).glob("*/*.ipynb")):
        if path.stem == path.parent.name:
            try:
                out[path.stem] = grade_ids(read_notebook(path))
            except NotebookError:
                continue
    return out


def _overlap(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def foreign_reason(nb, assignment_id: str, expected: set[str], known: dict[str, set[str]]) -> str:
    """Why ``nb`` is not ``assignment_id``'s notebook (its cells match another lesson better, or
    none of this lesson's cells are in it), or "" when it is. A learner who deleted a few cells is
    still graded (those cells score 0)."""
    have = grade_ids(nb)
    own = _overlap(have, expected)
    best = max(
        ((_overlap(have, ids), aid) for aid, ids in known.items() if aid != assignment_id),
        default=(0.0, ""),
    )
    if best[0] > own:
        return (
            f"this looks like {best[1]}'s notebook, not {assignment_id}'s ({len(have & known[best[1]])} "
            f"of its cells, {len(have & expected)} of {assignment_id}'s): {_resubmit(assignment_id)}"
        )
    if not have & expected:
        return (
            f"none of {assignment_id}'s graded cells are in it (were the cells copied into a new "
            f"notebook? nbgrader finds cells by their metadata): {_resubmit(assignment_id)}"
        )
    return ""


def unreadable_reason(folder: Path, assignment_id: str, notebook: str) -> tuple[object | None, str]:
    """``(notebook, "")`` for a readable ``folder/<notebook>.ipynb``, else ``(None, reason)``."""
    path = folder / f"{notebook}.ipynb"
    if path.is_symlink():  # the root grader would read wherever it points: never follow one
        return None, f"{path.name} is a symbolic link, not a notebook: {_resubmit(assignment_id)}"
    if not path.is_file():
        found = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        return None, (
            f"no {notebook}.ipynb in the submission (found: {', '.join(found) or 'nothing'}): "
            f"the notebook must keep its name; {_resubmit(assignment_id)}"
        )
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        return None, (
            f"{path.name} is {size / 2**20:.0f} MiB (more than {MAX_NOTEBOOK_BYTES // 2**20} MiB): "
            f"clear its outputs (Kernel > Restart & Clear Output), save, {_resubmit(assignment_id)}"
        )
    try:
        return read_notebook(path), ""
    except NotebookError as err:
        why = str(err).replace(str(path), path.name).rstrip(".")
        return None, f"{why}. Then {_resubmit(assignment_id)}"


def screen(
    submitted: Path,
    assignment_id: str,
    notebook: str,
    expected: set[str],
    known: dict,
    students: list[str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Students under ``submitted/*/<assignment_id>/`` (or only ``students``) whose notebook can
    be graded, and the reason for each one that cannot. Only ``<notebook>.ipynb`` counts, as for
    nbgrader."""
    good, bad = [], {}
    folders = (
        sorted(submitted.glob(f"*/{assignment_id}"))
        if students is None
        else [submitted / s / assignment_id for s in sorted(set(students))]
    )
    for folder in folders:
        nb, why = unreadable_reason(folder, assignment_id, notebook)
        why = why or foreign_reason(nb, assignment_id, expected, known)
        if why:
            bad[folder.parent.name] = why
        else:
            good.append(folder.parent.name)
    return good, bad


def identical_groups(
    submitted: Path, assignment_id: str, notebook: str, students: list[str], release: Path
) -> list[list[str]]:
    """Groups of students whose notebooks are byte-identical (the untouched release excepted)."""
    fresh = hashlib.sha256(release.read_bytes()).hexdigest() if release.is_file() else None
    by_hash: dict[str, list[str]] = {}
    for student in students:
        path = submitted / student / assignment_id / f"{notebook}.ipynb"
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != fresh:
            by_hash.setdefault(digest, []).append(student)
    return [group for group in by_hash.values() if len(group) > 1]


def expected_ids(db_url: str, assignment_id: str, notebook: str) -> set[str] | None:
    """The ``grade_id``s nbgrader recorded for the assignment's notebook, None if not in the
    gradebook (nbgrader then skips it itself)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        try:
            return {c.name for c in gb.find_notebook(notebook, assignment_id).source_cells}
        except MissingEntry:
            return None


def for_the_learner(why: str, assignment_id: str) -> str:
    """The reason as the learner reads it: what to do is theirs (submit again), not the instructor's."""
    return why.replace(_resubmit(assignment_id), f"submit {assignment_id} again")


def write_feedback(submitted: Path, feedback: Path, assignment_id: str, notebook: str, why: str):
    """``feedback/<student>/<assignment>/<notebook>.html`` saying why the submission was not graded,
    with the submission's ``timestamp.txt`` and ``submission_secret.txt``: nbgrader's release_feedback
    keys the learner's copy by them, so formgrader's Release Feedback delivers the reason to the
    learner's Assignment List like any feedback. Returns the page's path, or None when the submission
    has no secret (not from nbgrader submit: nothing could deliver it)."""
    if not (submitted / "submission_secret.txt").is_file():
        return None
    feedback.mkdir(parents=True, exist_ok=True)
    for name in ("timestamp.txt", "submission_secret.txt"):
        if (submitted / name).is_file():
            shutil.copyfile(submitted / name, feedback / name)
    text = html.escape(for_the_learner(why, assignment_id), quote=False)
    page = feedback / f"{notebook}.html"
    page.write_text(
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{assignment_id}: not graded"
        f"</title></head><body><h1>{assignment_id}: not graded</h1><p>Your submission could not be "
        f"graded: {text}</p><p>Score: none recorded for this submission.</p></body></html>\n"
    )
    return page
