"""The busy core of issue 23's goal: processes that spin while a campaign grades.

A correct solution must not lose points with one competing busy core. The campaigns (``busy_core_rate.py``,
``grader/assignments/lesson5/calibration/lesson5_calibrate.py --busy``, ``grader/assignments/lesson10/calibration/lesson10_calibrate.py --busy``) make that core with ``while True: pass`` processes,
unpinned, as another user's job would be: the scheduler, not the campaign, decides which core each one takes.
"""

import atexit
import signal
import subprocess
import sys


def start(n: int) -> list[subprocess.Popen]:
    """Start ``n`` spinning processes; they are killed at exit, also on Ctrl-C (they sit in sessions of their own,
    so the terminal's SIGINT does not reach them)."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(n)
    ]
    atexit.register(stop, hogs)
    # `kill PID` (SIGTERM) would skip atexit and leave the hogs spinning: make it an orderly exit
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    return hogs


def stop(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        if hog.poll() is None:
            hog.kill()
            hog.wait()
