"""The worker side of a lesson: what its probes, tasks and runtimes import inside a sandboxed worker.

Only modules in :data:`grader.sandbox.learner_view.WORKER_MODULES` may be imported from here: the
worker's view of the repository holds nothing else.
"""

from grader.sandbox import relay
from grader.sandbox.channel import ChannelError, tensor_from, tensor_msg
from grader.sandbox.timelimit import CHECK_SECONDS, CheckTimeout, expect, time_limit

__all__ = [
    "CHECK_SECONDS",
    "ChannelError",
    "CheckTimeout",
    "expect",
    "probe_quiz",
    "relay",
    "tensor_from",
    "tensor_msg",
    "time_limit",
]


def probe_quiz(worker):
    """Worker side: the learner's quiz answers (question -> choice), as short plain strings."""
    answers = worker.ns.get("QUIZ_ANSWERS")
    if not isinstance(answers, dict):
        raise NameError("your solution cells define no QUIZ_ANSWERS dict")
    return {"answers": {str(k)[:20]: str(v)[:20] for k, v in list(answers.items())[:20]}}, []
