"""Run the test suite in two lanes at once: what CI runs (`make test`).

**What it does.** The tests marked ``timed`` (tests/conftest.py: gradings and figures that rest on a
clock) run in one pytest process, one test at a time, as before; the rest of the suite runs in a
second pytest process **pinned to every core but the last**, beside it. The grader pins its timed
workers to the last core (``grader.sandbox.supervisor.start_worker``), so a timed grading never shares its
core with the other lane: it sees a busy neighbouring core, the condition its verdicts are built to
hold under (``test_grader_submissions.py::test_same_verdict_with_a_busy_core``), never a shared one.
The timed lane streams its output; the other lane's is printed when both are done, followed by
both lanes' failures and summary lines.

**When to use it.** `make test` and CI. ``python tests/lanes.py -x -k lesson13`` passes the extra
arguments to both lanes. With fewer than 2 usable cores (or ``EFFKIT_TEST_LANES=0``) it runs one
plain ``pytest`` instead.

**Expected gain.** The suite's untimed half (lesson runs, the site, the sandbox's bombs, lessons 8,
11 and 12's gradings: ~1,000 s alone) leaves the critical path: CI wall time is about the timed
lane's.

**Pitfalls.** Two pytest sessions share the machine: each gets its own ``--basetemp``; the untimed
lane writes no ``.pytest_cache``. A test that times something but is not in ``TIMED_FILES`` still
passes its verdicts (its timed worker is then pinned to the untimed lane's core, shared only with
that lane's one running test), but is slower and noisier: add it to the list.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accounts_util import open_interpreter_path, restore

ROOT = Path(__file__).resolve().parents[1]


def _pytest(args: list[str], lane: str, base: Path) -> list[str]:
    # the GPU-sized rehearsal is `make gpu-rehearsal`'s (~4 min of the timed lane), run before a stop
    # `make test-system`'s whole-system checks (~15 min) run before a stop, not in CI's 40 minutes
    select = (
        ["-m", "timed and not rehearsal and not system"]
        if lane == "timed"
        else ["-m", "not timed and not rehearsal and not system", "-p", "no:cacheprovider"]
    )
    return [sys.executable, "-m", "pytest", *select, f"--basetemp={base / lane}", *args]


def _report(lane: str, log: Path) -> list[str]:
    lines = log.read_text(errors="replace").splitlines()
    failed = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    done = re.compile(r"\d+ (passed|failed|errors?|deselected|skipped)\b.* in \d")
    last = next(
        (ln for ln in reversed(lines) if done.search(ln)), "(no summary line: see its output above)"
    )
    return [f"{lane} lane: {last.strip('= ')}"] + [f"  {ln}" for ln in failed]


def main(args: list[str]) -> int:
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) < 2 or os.environ.get("EFFKIT_TEST_LANES") == "0":
        return subprocess.call([sys.executable, "-m", "pytest", *args], cwd=ROOT)
    base = Path(tempfile.mkdtemp(prefix="effkit-lanes-"))
    start = time.perf_counter()
    opened = open_interpreter_path()  # for both lanes, until both end (tests/accounts_util.py)
    untimed_log = base / "untimed.log"
    with untimed_log.open("wb") as out:
        untimed = subprocess.Popen(
            _pytest(args, "untimed", base),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, EFFKIT_TEST_LANE="untimed"),
            preexec_fn=lambda: os.sched_setaffinity(0, cores[:-1]),
        )
    print(
        f"[lanes] untimed tests on core(s) {cores[:-1]} (log: {untimed_log}); timed tests here, their "
        f"workers on core {cores[-1]}",
        flush=True,
    )
    timed_log = base / "timed.log"
    try:
        with timed_log.open("w") as keep:
            timed = subprocess.Popen(
                _pytest(args, "timed", base),
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=dict(os.environ, EFFKIT_TEST_LANE="timed"),
            )
            for line in timed.stdout:
                sys.stdout.write(line)
                keep.write(line)
            timed_rc = timed.wait()
        timed_s = time.perf_counter() - start
        untimed_rc = untimed.wait()
    finally:
        if untimed.poll() is None:
            untimed.kill()
        restore(opened)
    print(
        f"\n[lanes] the untimed lane's output (done {time.perf_counter() - start:.0f} s after the start; "
        f"the timed lane took {timed_s:.0f} s):\n",
        flush=True,
    )
    sys.stdout.write(untimed_log.read_text(errors="replace"))
    print(
        "\n[lanes] "
        + "\n[lanes] ".join(_report("timed", timed_log) + _report("untimed", untimed_log))
    )
    # pytest's 5 = "no tests collected": a lane with nothing selected (e.g. -k for one file) is fine.
    # A lane killed by a signal has a negative code: that is a failure, not less than 0 (a killed timed
    # lane once passed CI's exit code, its summary line missing).
    codes = [0 if rc == 5 else rc for rc in (timed_rc, untimed_rc)]
    if os.environ.get("EFFKIT_KEEP_TEST_TMP") != "1":  # ~0.7 GB a run; CI's disk is this machine's
        shutil.rmtree(base, ignore_errors=True)
    else:
        print(f"[lanes] kept the lanes' temporary files in {base}")
    return 1 if any(rc < 0 for rc in codes) else max(codes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
