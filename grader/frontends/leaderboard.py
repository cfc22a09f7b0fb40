"""A leaderboard per timed lesson, from the signed grading archive only (``grader.common.evidence``).

A learner's record on a device class is their best grading that earned speed credit honestly:
accuracy gate passed, no error, no problem, work check clean, a measured speedup. Gradings are
replayed in time order and the record moves only when a new median beats the record's interval
upper bound, so noise alone cannot climb the board. Same archive, same board: nothing here reads
the clock.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from effkit.abtest import median_ci, median_ci_coverage
from grader.common import evidence
from grader.scoring.report import PerformanceReport, load_performance

CONFIDENCE = 0.95
GATE_PP = 0.5  # the accuracy tolerance the page states; the grader's gate decides each grading
RULES = (
    "Records are compared only within a device class (the grader's targets row: cpu, cpu-fp32, "
    "h100, a100, l4, t4, gpu): a CPU's speedup is never ranked against a GPU's.",
    "Every speedup is the median of back-to-back chunk pairs, baseline and learner interleaved "
    "in the same grading, on the same machine, timed by the grader.",
    f"Only gradings whose accuracy passed the grader's gate (paired mean within about "
    f"\u00b1{GATE_PP} pp of the baseline), with no error, problem or failed work check, count.",
    "A record moves only when a new grading's median speedup is above the record's interval "
    "upper bound; a better figure inside the interval is noise and leaves the record as it was.",
    "Ranks order the medians; records whose intervals overlap are not clearly different.",
    "Every figure comes from a grading report the grader signed (HMAC-SHA256 under the course "
    "key); unsigned, altered or misfiled reports are left out.",
)
ADJECTIVES = (
    "amber azure brave calm coral crisp dusky eager fair gentle golden hazel ivory jade keen "
    "lively lucid mellow misty noble olive pale quiet rapid rosy ruby sandy silver swift "
    "tawny velvet witty"
).split()
ANIMALS = (
    "badger bison crane dingo eagle egret ferret finch gecko heron ibis jackal koala lemur "
    "lynx marmot newt ocelot otter owl panda puffin quail raven seal stoat tapir toucan "
    "vole walrus wombat yak"
).split()


@dataclass
class Grading:
    """What the leaderboard takes from one verified report."""

    student: str
    assignment: str
    timestamp: str
    device: str
    device_class: str
    speedup: float | None
    interval: tuple[float, float] | None
    coverage: float | None
    mean_diff_pp: float | None
    signature: str
    why_not: str  # "" when this grading can hold a record

    @property
    def when(self) -> dt.datetime:
        t = dt.datetime.fromisoformat(self.timestamp)
        return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)  # the grader writes UTC


@dataclass
class Standing:
    """One learner on one lesson and device class: the record and how it got there."""

    student: str
    pseudonym: str
    record: Grading | None = None
    history: list[dict] = field(default_factory=list)

    @property
    def moves(self) -> int:
        """How often a later grading beat the record beyond its interval (the first is no move)."""
        return sum(h["event"] == "record moved" for h in self.history)


def pseudonym(key: bytes, student: str) -> str:
    """A readable name ("amber-otter-42") only the course key links back to ``student``."""
    d = hmac.new(key, f"pseudonym:{student}".encode(), hashlib.sha256).digest()
    return f"{ADJECTIVES[d[0] % len(ADJECTIVES)]}-{ANIMALS[d[1] % len(ANIMALS)]}-{d[2] % 100}"


def pseudonyms(key: bytes, students: set[str]) -> dict[str, str]:
    """Pseudonyms for every student; two that collide both get 4 more hex digits of their HMAC."""
    names = {s: pseudonym(key, s) for s in sorted(students)}
    taken: dict[str, int] = {}
    for n in names.values():
        taken[n] = taken.get(n, 0) + 1
    for s, n in names.items():
        if taken[n] > 1:
            names[s] = f"{n}-{hmac.new(key, f'pseudonym:{s}'.encode(), 'sha256').hexdigest()[:4]}"
    return names


def lesson_order(assignment: str) -> tuple:
    """lesson2 before lesson10: by the number in the id, then the id."""
    digits = re.findall(r"\d+", assignment)
    return (int(digits[-1]) if digits else math.inf, assignment)


def _number(x) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def device_class_of(report: PerformanceReport) -> str:
    """The board a grading competes on: the targets row, and on a CPU the ISA beside it
    ("cpu-fp32 [AVX2]"): an AVX2 EPYC and an AVX512 one share a row, never a race."""
    table = report.target.table or report.device_class or "unknown"
    return f"{table} [{report.isa}]" if report.isa else table


def grading_of(data: dict, signature: str) -> Grading:
    """A verified report (any archived shape) as a :class:`Grading`, with the reason it cannot
    hold a record. Raises ValueError for a report that does not validate."""
    report = load_performance(data)
    ratios = [r for r in report.speed_ratios if _number(r) is not None]
    speedup = _number(report.speedup)
    gate = report.gate
    if report.error:
        why = "the grading ended in an error"
    elif gate is None:
        why = "no accuracy gate was decided"
    elif gate.passed is not True:
        why = "accuracy gate failed"
    elif report.work_problems:
        why = "work check failed"
    elif report.problems:
        # a capped grading (lesson 14: points for beating naive, none for a tier) is not "no points"
        why = (
            "points withheld: " if report.points else "no performance points: "
        ) + report.problems[0]
    elif speedup is None or not ratios:
        why = "no speedup measured"
    else:
        why = ""
    dt.datetime.fromisoformat(report.timestamp)  # a report without a time cannot be placed
    if not report.student:
        raise ValueError("an archived report names no student")
    return Grading(
        student=report.student,
        assignment=report.assignment,
        timestamp=report.timestamp,
        device=report.device,
        device_class=device_class_of(report),
        speedup=speedup,
        interval=median_ci(ratios, CONFIDENCE) if ratios else None,
        coverage=median_ci_coverage(len(ratios), CONFIDENCE) if ratios else None,
        mean_diff_pp=_number(gate.mean_diff_pp) if gate else None,
        signature=signature,
        why_not=why,
    )


def load(
    course_dir: Path, key: bytes | None, lessons: list[str]
) -> tuple[list[Grading], list[str]]:
    """Every verified grading of ``lessons`` in the archive, and why each other file was refused."""
    root = Path(course_dir) / evidence.ARCHIVE_DIR
    found: dict[str, Grading] = {}
    rejected: list[str] = []
    for path in sorted(root.glob("*/*/*.json")) if root.is_dir() else []:
        assignment, student = path.parent.parent.name, path.parent.name
        if assignment not in lessons:
            continue
        try:
            if key is None:
                raise evidence.EvidenceError(f"no course key ({evidence.KEY_FILE})")
            signed = json.loads(path.read_text())
            report = evidence.verify(key, signed)
            if evidence.safe_name(str(report.get("student"))) != student:
                raise evidence.EvidenceError(f"a report of {report.get('student')!r} filed here")
            if report.get("assignment") != assignment:
                raise evidence.EvidenceError(
                    f"a report for {report.get('assignment')!r} filed here"
                )
            g = grading_of(report, signed["signature"])
        except (OSError, ValueError, KeyError, TypeError) as err:  # JSON and evidence errors too
            rejected.append(f"{path.relative_to(course_dir)}: {err}")
            continue
        found.setdefault(g.signature, g)  # the same grading filed twice counts once
    return sorted(found.values(), key=lambda g: (g.when, g.signature)), rejected


def standings(gradings: list[Grading], names: dict[str, str]) -> dict[tuple, Standing]:
    """Replay ``gradings`` (time order) into a Standing per (assignment, class, student)."""
    out: dict[tuple, Standing] = {}
    for g in gradings:
        s = out.setdefault(
            (g.assignment, g.device_class, g.student), Standing(g.student, names[g.student])
        )
        if g.why_not:
            event = "not eligible"
        elif s.record is None:
            event, s.record = "first record", g
        elif g.speedup > s.record.interval[1]:
            event, s.record = "record moved", g
        else:
            event = "within the record's interval" if g.speedup > s.record.speedup else "not better"
        s.history.append(
            {
                "timestamp": g.timestamp,
                "speedup": g.speedup,
                "interval": list(g.interval) if g.interval else None,
                "event": event,
                "why_not": g.why_not or None,
                "record": s.record.speedup if s.record else None,
            }
        )
    return out


def _row(s: Standing) -> dict:
    r = s.record
    row = {"student": s.student, "pseudonym": s.pseudonym, "gradings": len(s.history)}
    if r is not None:
        row |= {
            "speedup": r.speedup,
            "interval": list(r.interval),
            "coverage": r.coverage,
            "mean_diff_pp": r.mean_diff_pp,
            "device": r.device,
            "date": r.timestamp[:10],
            "timestamp": r.timestamp,
            "moves": s.moves,
        }
    return row | {"history": s.history}


def boards(gradings: list[Grading], names: dict[str, str]) -> list[dict]:
    """One board per lesson (lesson order): per device class, ranked records and the unranked."""
    by_lesson: dict[str, dict[str, list[Standing]]] = {}
    for (assignment, cls, _), s in standings(gradings, names).items():
        by_lesson.setdefault(assignment, {}).setdefault(cls, []).append(s)
    out = []
    for assignment in sorted(by_lesson, key=lesson_order):
        classes = {}
        for cls in sorted(by_lesson[assignment]):
            group = by_lesson[assignment][cls]
            held = sorted(
                (s for s in group if s.record),
                key=lambda s: (
                    -s.record.speedup,
                    -s.record.interval[0],
                    s.record.when,
                    s.pseudonym,
                ),
            )
            classes[cls] = {
                "ranked": [{"rank": i} | _row(s) for i, s in enumerate(held, 1)],
                "unranked": [
                    _row(s) for s in sorted(group, key=lambda s: s.pseudonym) if not s.record
                ],
            }
        mine = [g for g in gradings if g.assignment == assignment]
        out.append(
            {
                "assignment": assignment,
                "as_of": max(g.timestamp for g in mine),
                "gradings": len(mine),
                "confidence": CONFIDENCE,
                "rules": list(RULES),
                "classes": classes,
            }
        )
    return out


def write_boards(board_list: list[dict], out_dir: Path) -> list[Path]:
    """``<out_dir>/<assignment>.json`` per board: the record, byte for byte the same on a rerun."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for b in board_list:
        path = out_dir / f"{evidence.safe_name(b['assignment'])}.json"
        path.write_text(json.dumps(b, indent=1, sort_keys=True) + "\n")
        paths.append(path)
    return paths
