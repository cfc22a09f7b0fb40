"""Layer 4: everything a lesson author uses, and nothing else of the grader.

- :mod:`grader.kit.checks`: the parent side (an ``Assignment``, cell checks, quizzes, probe
  sessions, the timed protocol's ``GradingSpec``).
- :mod:`grader.kit.worker`: the worker side (probes' quiz answers, tensors over the channel, time
  limits, the ranks' relay). Workers see only these modules, so this file imports nothing.
- :mod:`grader.kit.audit`, :mod:`grader.kit.data`, :mod:`grader.kit.timed_runtime`: pieces of
  timed assignments; :mod:`grader.kit.in_notebook`: what a notebook's locked cells call.
"""
