"""Time limits for checks that call learner code in this process (SIGALRM, main thread only).

``CheckTimeout`` derives from ``BaseException`` so ``except Exception`` cannot swallow it. Off the
main thread, or without SIGALRM, ``time_limit`` does nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading

CHECK_SECONDS = 20


class CheckTimeout(BaseException):  # BaseException: a learner's `except Exception` cannot eat it
    pass


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def stop(signum, frame):
        raise CheckTimeout(what)

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except CheckTimeout as err:
        raise TimeoutError(
            f"{err} did not finish within {seconds:.0f} s, so the check was stopped. An infinite "
            "loop? (e.g. a while-loop that never reaches the last, partial batch)"
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def expect(ok: bool, message: str) -> None:
    if not ok:
        raise AssertionError(message)
