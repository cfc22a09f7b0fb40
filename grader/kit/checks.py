"""The parent side of a lesson: what its ``checks.py`` imports (never loaded in a worker)."""

from grader.common.device import default_device
from grader.common.quiet import quiet
from grader.sandbox.answer_closure import copies_in, makes_code_from_data, runs_code_from_data
from grader.sandbox.channel import ChannelError, tensor_from, tensor_msg
from grader.sandbox.launch import StateFolder
from grader.sandbox.probe import CallResult, ProbeSession
from grader.sandbox.relay import Relay
from grader.scoring.checks import (
    CheckFailed,
    Context,
    expect,
    received_tensor,
    stub_reason,
    without_comments,
)
from grader.scoring.quiz import quiz_check
from grader.timed.spec import GradingSpec

__all__ = [
    "copies_in",
    "makes_code_from_data",
    "runs_code_from_data",
    "CallResult",
    "ChannelError",
    "CheckFailed",
    "Context",
    "GradingSpec",
    "ProbeSession",
    "Relay",
    "StateFolder",
    "default_device",
    "expect",
    "quiet",
    "quiz_check",
    "received_tensor",
    "stub_reason",
    "tensor_from",
    "tensor_msg",
    "without_comments",
]
