"""``python -m grader farm ASSIGNMENT``: the arguments, the run, the table and ``--json``.

Exit status 0 when every collected submission is graded (now or in the ledger); 1 when some
grading failed or a submission could not be graded (each says why); 2 when the farm could not run.
"""

from __future__ import annotations

from grader import assignments
from grader.common import course
from grader.frontends import farm, farm_grade, farm_record
from grader.frontends.farm_ray import RayStartError


def add_parser(sub) -> None:
    s = sub.add_parser(
        "farm", help="grade every collected submission through Ray (local or a cluster)"
    )
    s.add_argument("assignment")
    s.add_argument(
        "--address",
        help="join this Ray cluster (e.g. auto, or HEAD:6379); default: a private Ray on this machine",
    )
    s.add_argument(
        "--slots",
        type=int,
        default=1,
        help="gradings at once on this machine (no --address); each timed one gets its slot's cores",
    )
    s.add_argument(
        "--limit",
        type=float,
        default=farm.DEFAULT_LIMIT_S,
        help="seconds one grading may take before it is stopped and marked failed",
    )
    s.add_argument("--device", help="cpu or cuda (default: cuda when the cluster has GPUs)")
    s.add_argument("--spec", help="grading spec (default: by device)")
    s.add_argument("--student", action="append", help="only this student (repeatable)")
    s.add_argument("--json", help="write the run's summary here")
    s.add_argument("--no-progress", action="store_true", help="no live progress bar")
    s.add_argument(
        "--uncalibrated",
        action="store_true",
        help="time lessons on device classes without a gate calibration (conservative gate)",
    )


def add_grade_parser(sub) -> None:
    s = sub.add_parser("grade", help="grade one collected submission through the farm")
    s.add_argument("assignment")
    s.add_argument("submission", help="course/submitted/<student>/<assignment>/<notebook>.ipynb")
    s.add_argument("--address", help="join this Ray cluster (default: a private Ray here)")
    s.add_argument("--limit", type=float, default=farm.DEFAULT_LIMIT_S)
    s.add_argument("--device", help="cpu or cuda (default: cuda when the cluster has GPUs)")
    s.add_argument("--spec", help="grading spec (default: by device)")
    s.add_argument("--json", help="write the GradingReport here")
    s.add_argument("--no-record", action="store_true", help="leave nbgrader's gradebook alone")
    s.add_argument(
        "--uncalibrated", action="store_true", help="time it even without a gate calibration"
    )


def grade_main(args) -> int:
    """0 graded, 1 failed (the report says why), 2 not a collected submission of a known lesson."""
    try:
        report = farm_grade.grade(
            args.assignment,
            args.submission,
            address=args.address,
            device=args.device,
            spec=args.spec,
            limit_s=args.limit,
            record=not args.no_record,
            uncalibrated=args.uncalibrated,
        )
    except (ValueError, RayStartError) as err:
        print(f"grader grade: {err}")
        return 2
    print(farm_record.line(report))
    if args.json:
        course.write_report(args.json, report.model_dump(mode="json"))
    return 0 if report.status == "graded" else 1


def main(args) -> int:
    try:
        assignments.get(args.assignment)
    except ValueError as err:
        print(f"grader farm: {err}")
        return 2
    if args.slots < 1 or args.limit <= 0:
        print("grader farm: --slots must be >= 1 and --limit > 0")
        return 2
    try:
        out = farm.run(
            args.assignment,
            address=args.address,
            slots=args.slots,
            limit_s=args.limit,
            device=args.device,
            spec=args.spec,
            students=args.student,
            progress=not args.no_progress,
            uncalibrated=args.uncalibrated,
        )
    except RayStartError as err:  # the farm never ran: nothing graded, nothing recorded
        print(f"grader farm: {err}")
        return 2
    if not out.reports and not out.refused:
        print(
            f"grader farm: no submissions in {course.course_dir() / 'submitted'}/*/{args.assignment}/"
        )
        return 2
    summary = farm_record.summary(args.assignment, out)
    farm_record.print_table(summary)
    if args.json:
        course.write_report(args.json, summary)
    return 1 if summary["failed"] or summary["refused"] else 0
