"""A probe call's limit is the worker's CPU time within a wall-clock stretch (issue 49 §3: lesson 8's reference
lost 2 points to "did not return within 30 s" at load 12, waiting for a core)."""

import subprocess
import sys
import time

from grader.sandbox.cpu_budget import STRETCH, more_time, tree_cpu_seconds


def test_a_busy_tree_is_charged_its_cpu_and_a_sleeping_one_nothing():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)  # both started
        b0, i0 = tree_cpu_seconds(busy.pid), tree_cpu_seconds(idle.pid)
        time.sleep(1.5)
        busy_used, idle_used = tree_cpu_seconds(busy.pid) - b0, tree_cpu_seconds(idle.pid) - i0
        assert busy_used > 0.05, busy_used  # a share of a core, even at load 10 (0.2 s seen there)
        assert idle_used < 0.02, idle_used
    finally:
        busy.kill(), idle.kill()
        busy.wait(), idle.wait()
    assert tree_cpu_seconds(busy.pid) is None  # gone: unknown, never zero


def test_the_deadline_moves_only_for_a_worker_that_did_not_get_its_cpu():
    assert more_time(30, 30, 29.5) == 1.0  # nearly spent: at least a second more
    assert more_time(30, 30, 8) == 22  # starved at load 12: the rest of its budget
    assert more_time(30, 30, 31) == 0  # a busy loop with a core: stopped at the limit
    assert more_time(30, STRETCH * 30, 2) == 0  # never past the stretch (a sleep forever)
    assert more_time(30, 100, 2) == STRETCH * 30 - 100  # the last stretch of wall clock
    assert more_time(30, 30, None) == 0  # no CPU figure: the plain wall-clock limit
