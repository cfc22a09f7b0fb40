"""``python -m grader autograde ASSIGNMENT``: nbgrader autograde + export + a cohort summary.

Invalid notebooks are excluded first so nbgrader never touches their gradebook entries. nbgrader
needs ``alembic`` on ``PATH``: the interpreter's ``bin`` folder is added.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from grader import assignments
from grader.common import course
from grader.frontends import screening, sources
from grader.sandbox.learner_view import WITHHELD
from grader.scoring.report import load_performance

REPO_ROOT = Path(__file__).resolve().parents[2]


def nbgrader_env(spec: str | None = None) -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["EFFKIT_COURSE_ROOT"] = str(course.course_root())
    if spec:
        env["EFFKIT_GRADER_SPEC"] = spec
    return env


def nbgrader(
    *args: str, spec: str | None = None, env_extra: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` with this repository's nbgrader_config.py and the course root."""
    return subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=REPO_ROOT,
        env=nbgrader_env(spec) | (env_extra or {}),
        text=True,
        capture_output=True,
    )


def nbgrader_streaming(*args: str, spec: str | None = None) -> int:
    """Like `nbgrader` but prints nbgrader's log and the grader's progress as they come."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=REPO_ROOT,
        env=nbgrader_env(spec),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    for line in proc.stdout:
        if "SAWarning" not in line and "for notebook in submission" not in line:  # nbgrader noise
            print(line, end="", flush=True)
    return proc.wait()


def generate(assignment_ids: list[str], check: bool = False) -> int:
    """Render each exercise's jupytext source (``grader.frontends.sources``), then ``nbgrader
    generate_assignment --force`` for each assignment (default: all in solutions/).

    ``check``: only report the solution notebooks that differ from their source (exit 1)."""
    if check:
        bad = sources.stale(assignment_ids or None)
        for aid in bad:
            print(f"{course.SOURCE_DIR}/{aid}/{aid}.ipynb is stale: run `make exercises`")
        return 1 if bad else 0
    for aid in sources.build(assignment_ids or None):
        print(f"rendered {course.SOURCE_DIR}/{aid}/{aid}.ipynb from its .py source")
    source = course.course_root() / course.SOURCE_DIR
    ids = assignment_ids or sorted(
        p.name for p in source.iterdir() if (p / f"{p.name}.ipynb").is_file()
    )
    for aid in ids:
        done = nbgrader("generate_assignment", aid, "--force")
        if done.returncode != 0:
            print(f"grader generate: nbgrader failed for {aid}:\n{done.stderr[-3000:]}")
            return 2
        print(f"generated {course.RELEASE_DIR}/{aid}/ from {course.SOURCE_DIR}/{aid}/")
    return 0


def screen_submissions(
    assignment_id: str, students: list[str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """Students (all collected, or only ``students``) whose notebook can be graded, and the
    reason for each one that cannot (``grader.frontends.screening``: not a notebook, too large,
    another lesson's)."""
    a = assignments.get(assignment_id)
    known = screening.source_ids()
    db = f"sqlite:///{course.course_dir() / 'gradebook.db'}"
    expected = screening.expected_ids(db, assignment_id, a.notebook)
    if expected is None:  # not generated yet: nbgrader will say so
        expected = known.get(assignment_id, set())
    submitted = course.course_dir() / "submitted"
    return screening.screen(submitted, assignment_id, a.notebook, expected, known, students)


def copying_notes(assignment_id: str, students: list[str]) -> list[str]:
    """One line per group of byte-identical submissions: possible copying, a note only."""
    a = assignments.get(assignment_id)
    groups = screening.identical_groups(
        course.course_dir() / "submitted",
        assignment_id,
        a.notebook,
        students,
        course.release_notebook(assignment_id, a.notebook),
    )
    return [
        f"note: {', '.join(g)} submitted byte-identical {a.notebook}.ipynb files: possible "
        "copying, for you to look at (graded as usual, no points taken)"
        for g in groups
    ]


def cohort(assignment_id: str, students: list[str]) -> list[dict]:
    from nbgrader.api import Gradebook, MissingEntry

    a = assignments.get(assignment_id)
    db = f"sqlite:///{course.course_dir() / 'gradebook.db'}"
    rows = []
    with Gradebook(db) as gb:
        for student in students:
            row = {"student": student, "total": None, "max_total": None}
            try:
                sub = gb.find_submission(assignment_id, student)
                row["total"], row["max_total"] = sub.score, sub.max_score
            except MissingEntry:
                pass
            path = (
                course.course_dir()
                / "autograded"
                / student
                / assignment_id
                / f"{a.notebook}.grader.json"
            )
            if path.is_file():
                r = load_performance(json.loads(path.read_text()))
                row.update(
                    speedup=r.speedup,
                    points=r.points,
                    device=r.device,
                    acc_diff_pp=r.gate.mean_diff_pp if r.gate else None,
                    gate=r.gate.passed if r.gate else None,
                    target=r.target.target,
                    threshold=r.gate.threshold_pp if r.gate else None,
                    floor=r.target.floor,
                    problems=r.problems,
                )
            rows.append(row)
    return rows


def _fmt(value, spec: str) -> str:
    if isinstance(value, int | float):
        return format(value, spec)
    width = "".join(ch for ch in spec.split(".")[0] if ch.isdigit())
    return "-".rjust(int(width or 1))


def print_table(assignment_id: str, rows: list[dict], bad: dict[str, str]) -> None:
    print(f"\n{assignment_id}: {len(rows)} graded, {len(bad)} not gradable")
    print(
        f"{'student':16s} {'speedup':>8s} {'acc diff':>9s} {'gate':>5s} {'perf':>6s} {'total':>12s}  note"
    )
    for r in rows:
        gate = {True: "pass", False: "FAIL"}.get(r.get("gate"), "-")
        note = (r.get("problems") or [""])[0][:70]
        print(
            f"{r['student']:16s} {_fmt(r.get('speedup'), '8.2f')} {_fmt(r.get('acc_diff_pp'), '+9.2f')} "
            f"{gate:>5s} {_fmt(r.get('points'), '6.2f')} {_fmt(r['total'], '5.2f')} / "
            f"{_fmt(r['max_total'], '<5g')}  {note}"
        )
    for student, why in bad.items():
        print(f"{student:16s} not graded: {why}")


def plot(assignment_id: str, rows: list[dict], path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [
        r for r in rows if r.get("speedup") is not None and r.get("acc_diff_pp") is not None
    ]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in measured:
        ax1.scatter(r["speedup"], r["acc_diff_pp"], color="tab:green" if r["gate"] else "tab:red")
        ax1.annotate(
            r["student"],
            (r["speedup"], r["acc_diff_pp"]),
            fontsize=8,
            xytext=(3, 3),
            textcoords="offset points",
        )
    if measured:
        ax1.axvline(measured[0]["target"], ls="--", color="gray", label="target")
        ax1.axvline(measured[0]["floor"], ls=":", color="gray", label="floor")
    ax1.axhline(-0.5, ls=":", color="tab:red", lw=0.8, label="-0.5 pp tolerance")
    if measured and measured[0].get("threshold") is not None:
        ax1.axhline(
            measured[0]["threshold"], ls="--", color="tab:red", lw=0.8, label="gate threshold"
        )
    ax1.set(
        xlabel="speedup vs baseline (x)",
        ylabel="accuracy - baseline (pp)",
        title="speed and accuracy",
    )
    ax1.legend(fontsize=8)
    names = [r["student"] for r in rows]
    ax2.bar(names, [r["total"] or 0 for r in rows], color="tab:blue")
    ax2.set(ylabel="points", title="total points")
    ax2.tick_params(axis="x", rotation=45)
    devices = sorted({r["device"] for r in measured if r.get("device")})
    fig.suptitle(f"{assignment_id} cohort - measured on {', '.join(devices) or 'n/a'}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def unsealed_reason(assignment_id: str, root: bool | None = None) -> str | None:
    """Why grading ``assignment_id`` here would not hold: its answers are withheld from the workers by
    a mount namespace (learner_view.WITHHELD), which only root can build; without it every file,
    effkit's answer included, stays readable to the learner's code. None when it holds."""
    withheld = WITHHELD.get(assignment_id)
    if not withheld or (os.geteuid() == 0 if root is None else root):
        return None
    return (
        f"{assignment_id}'s workers must not see {', '.join(withheld)} (the exercise's answer, in "
        "effkit): only root can hide it (a mount namespace per worker), and this grader is not root. "
        "Run the grading as root, or pass --allow-unsealed to grade anyway (the one-line call to "
        "effkit then earns points)"
    )


def autograde(
    assignment_id: str,
    *,
    spec: str | None = None,
    force: bool = True,
    allow_unsealed: bool = False,
) -> int:
    try:
        assignments.get(assignment_id)
    except ValueError as err:
        print(f"grader autograde: {err}")
        return 2
    unsealed = unsealed_reason(assignment_id)
    if unsealed and not allow_unsealed:
        print(f"grader autograde: refused: {unsealed}")
        return 2
    if unsealed:
        print(f"grader autograde: WARNING, grading unsealed: {unsealed}")
    good, bad = screen_submissions(assignment_id)
    if not good and not bad:
        print(
            f"grader autograde: no submissions in {course.course_dir() / 'submitted'}/*/{assignment_id}/"
        )
        return 2
    notebook = assignments.get(assignment_id).notebook
    for student, why in bad.items():
        print(f"[{student}] not graded, any earlier grade kept in the gradebook: {why}")
        # the learner reads the same reason in their feedback (Release Feedback delivers it)
        screening.write_feedback(
            course.course_dir() / "submitted" / student / assignment_id,
            course.course_dir() / "feedback" / student / assignment_id,
            assignment_id,
            notebook,
            why,
        )
    if good:
        args = ["autograde", assignment_id] + (["--force"] if force else [])
        if bad:
            args.append(f"--CourseDirectory.student_id_exclude={','.join(bad)}")
        returncode = nbgrader_streaming(*args, spec=spec)
        if returncode != 0:
            print(f"nbgrader autograde exited with {returncode}; see its log above")
        exported = nbgrader("export", f"--to={course.course_dir() / 'grades.csv'}")
        if exported.returncode != 0:
            print(f"nbgrader export failed:\n{exported.stderr[-2000:]}")
    rows = cohort(assignment_id, good)
    print_table(assignment_id, rows, bad)
    png = plot(assignment_id, rows, course.course_dir() / "reports" / f"{assignment_id}_cohort.png")
    for line in copying_notes(assignment_id, good):
        print(line)
    print(f"plot: {png}\ngrades: {course.course_dir() / 'grades.csv'}")
    graded = [r for r in rows if r["total"] is not None]
    return 0 if graded or not good else 1
