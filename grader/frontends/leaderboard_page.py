"""The leaderboard as a self-contained HTML page (inline CSS and SVG, no script, no network) and
as text for the terminal. Learner ids, device names and lesson ids are untrusted text: every one
goes through ``html.escape``.
"""

from __future__ import annotations

import shutil
import sys
from html import escape
from pathlib import Path

from grader import assignments
from grader.common import course, evidence
from grader.frontends import cohort_host, cohort_plan
from grader.frontends import leaderboard as lb

CSS = """
body{font:15px/1.45 system-ui,sans-serif;max-width:80rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{margin-bottom:.2rem}h2{margin-top:2.2rem;border-bottom:2px solid #ddd}h3{margin-bottom:.3rem}
.rules{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:6px;padding:.6rem 1.2rem}
table{border-collapse:collapse;width:100%;margin:.4rem 0 1rem;font-size:.93em}
th,td{padding:.3rem .5rem;border-bottom:1px solid #eee;text-align:left;white-space:nowrap}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#fafafa}
.muted{color:#777;font-size:.9em}svg{vertical-align:middle}
"""
COLUMNS = (
    "rank",
    "learner",
    "best speedup",
    "interval",
    "accuracy diff",
    "device",
    "date",
    "gradings / record moves",
    "history",
)


def name(row: dict, real_names: bool) -> str:
    return row["student"] if real_names else row["pseudonym"]


def _interval(row: dict) -> str:
    lo, hi = row["interval"]
    return f"{lo:.2f}\u2013{hi:.2f}x ({row['coverage']:.0%})"


def _diff(row: dict) -> str:
    d = row.get("mean_diff_pp")
    return "" if d is None else f"{d:+.2f} pp"


def sparkline(history: list[dict], width: int = 96, height: int = 22) -> str:
    """The record as a step line over the learner's gradings, each eligible grading a dot."""
    points = [(i, h["record"], h["speedup"]) for i, h in enumerate(history) if h["record"]]
    if len(history) < 2 or not points:
        return ""
    values = [v for _, r, s in points for v in (r, s) if v is not None]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0

    def xy(i, v) -> tuple[str, str]:
        x = 3 + i * (width - 6) / (len(history) - 1)
        return f"{x:.1f}", f"{height - 3 - (v - lo) / span * (height - 6):.1f}"

    steps, prev = [], None
    for i, r, _ in points:
        if prev is not None and r != prev:
            steps.append(",".join(xy(i, prev)))
        steps.append(",".join(xy(i, r)))
        prev = r
    if points[-1][0] < len(history) - 1:
        steps.append(",".join(xy(len(history) - 1, prev)))
    dots = "".join(
        '<circle cx="{}" cy="{}" r="1.6"/>'.format(*xy(i, h["speedup"]))
        for i, h in enumerate(history)
        if h["speedup"] is not None and not h["why_not"]
    )
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="record history">'
        f'<polyline fill="none" stroke="#2b6cb0" stroke-width="1.5" points="{" ".join(steps)}"/>'
        f'<g fill="#c05621">{dots}</g></svg>'
    )


def _table(cls: str, group: dict, real_names: bool) -> list[str]:
    out = [f"<h3>device class <code>{escape(cls)}</code></h3>", "<table><thead><tr>"]
    out.append("".join(f"<th>{escape(c)}</th>" for c in COLUMNS) + "</tr></thead><tbody>")
    for row in group["ranked"]:
        cells = (
            (str(row["rank"]), "n"),
            (escape(name(row, real_names)), ""),
            (f"{row['speedup']:.2f}x", "n"),
            (escape(_interval(row)), "n"),
            (escape(_diff(row)), "n"),
            (escape(row["device"]), ""),
            (escape(row["date"]), ""),
            (f"{row['gradings']} / {row['moves']}", "n"),
            (sparkline(row["history"]), ""),
        )
        out.append(
            "<tr>"
            + "".join(f'<td class="{c}">{v}</td>' if c else f"<td>{v}</td>" for v, c in cells)
        )
    out.append("</tbody></table>")
    if group["unranked"]:
        who = ", ".join(escape(name(r, real_names)) for r in group["unranked"])
        out.append(f'<p class="muted">graded, no eligible grading yet: {who}</p>')
    return out


def html_page(
    boards: list[dict], real_names: bool = False, title: str = "effkit leaderboard"
) -> str:
    """The page: the rules first, then a section per lesson and a table per device class."""
    rules = boards[0]["rules"] if boards else []
    conf = boards[0]["confidence"] if boards else 0.95
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        '<p class="muted">Best verified speedup per learner and lesson. Intervals are '
        f"order-statistic intervals for the median of a grading's chunk pairs, asked at "
        f"{conf:.0%}; the percentage beside each is its real coverage for that many pairs.</p>",
        '<div class="rules"><h3>Rules</h3><ul>',
        *(f"<li>{escape(r)}</li>" for r in rules),
        "</ul></div>",
    ]
    for b in boards:
        aid = escape(b["assignment"])
        out.append(f'<h2 id="{aid}">{aid}</h2>')
        out.append(
            f'<p class="muted">{b["gradings"]} signed gradings, as of {escape(b["as_of"][:10])}</p>'
        )
        for cls, group in b["classes"].items():
            out += _table(cls, group, real_names)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def text_tables(boards: list[dict], real_names: bool = False) -> str:
    """A compact table per lesson and device class, for the terminal."""
    lines = []
    for b in boards:
        lines.append(
            f"{b['assignment']}  ({b['gradings']} signed gradings, as of {b['as_of'][:10]})"
        )
        for cls, group in b["classes"].items():
            lines.append(f"  {cls}")
            for row in group["ranked"]:
                lines.append(
                    f"  {row['rank']:>4}  {name(row, real_names)[:28]:28s} {row['speedup']:6.2f}x  "
                    f"{_interval(row):22s} {_diff(row):>10s}  {row['date']}  "
                    f"gradings {row['gradings']}, moves {row['moves']}"
                )
            if group["unranked"]:
                lines.append(
                    f"        no eligible grading yet: {len(group['unranked'])} learner(s)"
                )
    return "\n".join(lines)


def run(
    lessons: list[str],
    out: str | None = None,
    publish: str | None = None,
    real_names: bool = False,
) -> int:
    """``python -m grader leaderboard``: verify the archive, write the JSON records and the page."""
    timed = [a for a in assignments.known() if assignments.get(a).performance_cell]
    unknown = [a for a in lessons if a not in timed]
    if unknown:
        print(f"grader leaderboard: no timed grading in {unknown}; timed lessons: {timed}")
        return 2
    course_dir = course.course_dir()
    key = evidence.load_key(course_dir, create=False)
    gradings, rejected = lb.load(course_dir, key, lessons or timed)
    for r in rejected:
        print(f"rejected {r}", file=sys.stderr)
    if not gradings:
        print(
            f"grader leaderboard: no signed gradings in {course_dir / evidence.ARCHIVE_DIR} "
            f"for {', '.join(lessons or timed)}: `python -m grader autograde LESSON` archives one "
            "per graded submission"
        )
        return 0
    boards = lb.boards(gradings, lb.pseudonyms(key, {g.student for g in gradings}))
    folder = Path(out) if out else course_dir / "leaderboard"
    lb.write_boards(boards, folder)
    page = folder / "index.html"
    page.write_text(html_page(boards, real_names))
    print(text_tables(boards, real_names))
    if rejected:
        print(f"{len(rejected)} report(s) rejected: listed on stderr, not on the page")
    print(f"\npage: {page} (JupyterLab: right-click it > Open With > HTML Viewer)")
    print(f"records: {folder}/<lesson>.json")
    if publish:
        print(f"published: {publish_page(page, Path(publish))}")
    elif not real_names:  # a cohort on this machine: where its learners look
        publish_to_cohort(page)
    return 0


def publish_to_cohort(page: Path) -> None:
    """Into the cohort's read-only folder and every learner's ``~/leaderboard/`` (root's, 0755)."""
    plan = cohort_plan.load_plan()
    if not plan or not plan.leaderboard:
        return
    print(f"published: {publish_page(page, Path(plan.leaderboard))}")
    served = cohort_host.copy_into_homes(page, plan.learners)
    print(f"  and as ~/leaderboard/{page.name} for {len(served)} of {len(plan.learners)} learners")


def publish_page(page: Path, folder: Path) -> Path:
    """Copy the page alone into ``folder``, readable by every account, writable by none but ours."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    dest = Path(shutil.copyfile(page, folder / "index.html"))
    dest.chmod(0o644)
    return dest
