"""Command line: ``python -m grader {check,perf,autograde,farm,grade,generate,cohort,leaderboard,gate-sim,calibrate,calibrate-gradings,budget,stress,campaign}``.

Exit status 0 when grading ran, whatever the score; 2 when it could not run (a malformed
notebook, an unknown assignment, a baseline that failed).
"""

from __future__ import annotations

import argparse
import sys

from grader.cli import farm, tools
from grader.cli.campaign import campaign
from grader.common import course
from grader.common.course import write_report
from grader.common.quiet import quiet
from grader.frontends import cohort, grading_audit, pipeline
from grader.frontends.autograde import autograde, generate
from grader.frontends.check import check
from grader.frontends.leaderboard_page import run as leaderboard
from grader.frontends.notebook import NotebookError, nbgrader_meta, solution_sources
from grader.scoring.perf import GradingError, grade
from grader.timed import gate


def perf(args) -> int:
    """Only the timed grading: what a notebook's performance cell runs (grader.kit.in_notebook)."""
    try:
        sub = pipeline.load(args.notebook, args.assignment)
    except (NotebookError, ValueError) as err:
        print(f"grader perf: {err}")
        return 2
    a = sub.assignment
    if a.performance_cell is None:
        print(f"grader perf: {a.id} has no timed grading; use `python -m grader check`")
        return 2
    perf_cell = next(
        c for c in sub.notebook.cells if nbgrader_meta(c).get("grade_id") == a.performance_cell
    )
    cells = [(c.grade_id, c.source) for c in solution_sources(sub.notebook, sub.allowed)]
    try:
        with quiet():
            result = grade(
                a,
                cells,
                float(nbgrader_meta(perf_cell).get("points", 0)),
                device=args.device,
                spec_name=args.spec,
            )
    except GradingError as err:
        print(f"grader perf: the grader could not run: {err}")
        return 2
    print(result.feedback)
    if args.json:
        course.write_report(args.json, result.report.model_dump(mode="json"))
    return 0


def gate_sim(args) -> int:
    results = tools.gate_sim(args.calibration, args.repeats, args.trials, args.drop)
    return 0 if all(r.ok() for r in results) else 1


def calibrate(args) -> int:
    out = tools.calibrate(args.assignment, args.spec, args.pairs, args.chunk, save=not args.no_save)
    if args.json:
        write_report(args.json, out)
    return 0


def calibrate_gradings(args) -> int:
    cal = tools.calibrate_gradings(args.calibration, args.reports, save=not args.no_save)
    g = gate.Gate.from_calibration(cal.grading_repeats, cal)
    return 1 if g.from_gradings and not g.powered else 0


def budget(args) -> int:
    out = tools.budget(args.assignment, args.spec)
    if args.json:
        write_report(args.json, out)
    return 0


def campaign_cmd(args) -> int:
    try:
        summary = campaign(args.assignment, args.times, args.busy, args.spec, args.json)
    except KeyboardInterrupt as stop:  # SIGINT or SIGTERM: the JSON holds every finished grading
        print(
            f"campaign stopped ({stop or 'interrupted'})"
            + (f"; see {args.json}" if args.json else "")
        )
        return 130
    return 0 if summary["full_marks"] == summary["gradings"] else 1


def stress(args) -> int:
    try:
        summary = tools.stress(args.assignment, args.times, args.busy, args.spec, args.json)
    except (
        KeyboardInterrupt
    ) as stop:  # SIGINT or SIGTERM: the JSON already holds every finished grading
        print(
            f"stress stopped ({stop or 'interrupted'})"
            + (f"; finished gradings are in {args.json}" if args.json else "")
        )
        return 130
    return 0 if summary["same_verdict"] else 1


COMMANDS = {
    "check": lambda a: check(
        a.notebook, assignment_id=a.assignment, json_out=a.json, spec_name=a.spec, device=a.device
    ),
    "perf": perf,
    "autograde": lambda a: autograde(a.assignment, spec=a.spec, allow_unsealed=a.allow_unsealed),
    "farm": farm.main,
    "grade": farm.grade_main,
    "generate": lambda a: generate(a.assignments, check=a.check),
    "gate-sim": gate_sim,
    "calibrate": calibrate,
    "calibrate-gradings": calibrate_gradings,
    "budget": budget,
    "stress": stress,
    "campaign": campaign_cmd,
    "cohort": lambda a: {
        "up": lambda: cohort.up(
            a.learners,
            a.port,
            a.prefix,
            a.exchange,
            a.memory_gb,
            a.cpus,
            a.tmp_mb,
            a.home_gb,
            a.exchange_gb,
        ),
        "down": lambda: cohort.down(a.remove_accounts),
        "status": cohort.status,
        "verify": grading_audit.verify,
    }[a.action](),
    "leaderboard": lambda a: leaderboard(a.assignments, a.out, a.publish, a.real_names),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_ in (
        ("check", "run every check of a notebook, as autograding does"),
        ("perf", "only the performance grading of a notebook's solution cells"),
    ):
        s = sub.add_parser(name, help=help_)
        s.add_argument("notebook")
        s.add_argument("--assignment", help="assignment id (default: from the notebook's name)")
        s.add_argument("--json", help="write the report here")
        s.add_argument("--spec", help="grading spec (default: by device, or $EFFKIT_GRADER_SPEC)")
        s.add_argument("--device", help="cpu or cuda (default: cuda if available)")
    s = sub.add_parser("autograde", help="nbgrader autograde + export + cohort summary and plot")
    s.add_argument("assignment")
    s.add_argument("--spec")
    s.add_argument(
        "--allow-unsealed",
        action="store_true",
        help="grade a lesson whose answers are withheld from workers even without root (not sealed)",
    )
    farm.add_parser(sub)
    farm.add_grade_parser(sub)
    s = sub.add_parser("generate", help="render solutions/<id>/<id>.py, then exercises/ (nbgrader)")
    s.add_argument("assignments", nargs="*", help="default: every folder in solutions/")
    s.add_argument(
        "--check",
        action="store_true",
        help="only report solution notebooks stale against their .py",
    )
    s = sub.add_parser("gate-sim", help="Monte Carlo error rates of the accuracy gate")
    s.add_argument("--calibration", default="lesson2-smoke-cpu")
    s.add_argument("--repeats", type=int)
    s.add_argument("--trials", type=int, default=200_000)
    s.add_argument("--drop", type=float, default=1.5)
    s = sub.add_parser(
        "calibrate", help="measure the paired accuracy noise with the reference solution"
    )
    s.add_argument("--assignment", default="lesson2")
    s.add_argument("--spec")
    s.add_argument("--pairs", type=int, default=12)
    s.add_argument("--chunk", type=int, default=4)
    s.add_argument("--no-save", action="store_true")
    s.add_argument("--json")
    s = sub.add_parser(
        "calibrate-gradings", help="set the accuracy gate from stress gradings' paired means"
    )
    s.add_argument("calibration", help="e.g. lesson2-smoke-cpu")
    s.add_argument(
        "reports", nargs="+", help="JSON reports of `stress` on the calibration's device"
    )
    s.add_argument("--no-save", action="store_true")
    s = sub.add_parser("budget", help="grading cost vs the learner's own two smoke runs")
    s.add_argument("--assignment", default="lesson2")
    s.add_argument("--spec")
    s.add_argument("--json")
    s = sub.add_parser("stress", help="grade the reference solution N times with busy cores")
    s.add_argument("--assignment", default="lesson2")
    s.add_argument("--times", type=int, default=10)
    s.add_argument("--busy", type=int, default=1)
    s.add_argument("--spec")
    s.add_argument("--json")
    s = sub.add_parser(
        "campaign", help="grade every check of the reference N times with busy cores"
    )
    s.add_argument("assignment")
    s.add_argument("--times", type=int, default=50)
    s.add_argument("--busy", type=int, default=1)
    s.add_argument("--spec")
    s.add_argument("--json")
    s = sub.add_parser("cohort", help="JupyterHub for an instructor and N learners (needs root)")
    s.add_argument("action", choices=["up", "down", "status", "verify"])
    s.add_argument("--learners", type=int, default=2)
    s.add_argument("--port", type=int, default=8000, help="the hub's port on 127.0.0.1")
    s.add_argument("--prefix", default="effkit-", help="Unix account names start with this")
    s.add_argument("--remove-accounts", action="store_true", help="down: also delete the accounts")
    s.add_argument(
        "--exchange", default="", help="default: $EFFKIT_EXCHANGE or /srv/nbgrader/exchange"
    )
    s.add_argument("--memory-gb", type=float, default=3.0, help="per learner, /tmp included")
    s.add_argument("--cpus", type=float, default=1.0, help="cores per learner")
    s.add_argument("--tmp-mb", type=int, default=512, help="each learner's private /tmp size")
    s.add_argument(
        "--home-gb", type=float, default=4.0,
        help="each account's home, an ext4 image of its own allocated in full (0: unbounded)",
    )  # fmt: skip
    s.add_argument("--exchange-gb", type=float, default=4.0, help="the exchange's own image")
    s = sub.add_parser("leaderboard", help="best verified speedups per lesson: JSON and HTML page")
    s.add_argument("assignments", nargs="*", help="default: every timed lesson")
    s.add_argument(
        "--out",
        help="folder for the page and the records, which name students: keep it private "
        "(default: course/leaderboard)",
    )
    s.add_argument("--publish", help="copy the page alone (index.html) into this folder")
    s.add_argument("--real-names", action="store_true", help="student ids instead of pseudonyms")
    args = p.parse_args(argv)
    return COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
