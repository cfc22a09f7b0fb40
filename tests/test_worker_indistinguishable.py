"""The probe worker and the timed worker look the same to learner code (issue 52 §1).

The timed worker told itself apart from the probe worker by ``$EFFKIT_GRADER_DATA``, the folder bound
only there, ``$EFFKIT_DATA``, its file-size limit and an effkit without the lesson's answers withheld; a
submission then ran its honest code where it was checked and something else where it was timed. A
learner's cell takes the fingerprint a submission would, in lesson 2's probe worker and in its timed
learner worker (as the protocol loads it: its inputs folder not yet filled), and the two must be
equal. What still differs (argv, loaded modules, the call stack, CPU pinning, the data handed over)
is in the threat model; the parent's judge of the timed run's batches holds there.
"""

import json

import pytest

from grader.sandbox.launch import is_root
from grader.sandbox.probe import ProbeSession

FINGERPRINT = """
import hashlib, json, os, resource
from pathlib import Path
import effkit.workloads.cifar.pipelines as _pipelines
_inputs = "/tmp/grader-inputs"
_fp = {
    "env": dict(sorted(os.environ.items())),
    "inputs": sorted(os.listdir(_inputs)) if os.path.isdir(_inputs) else None,
    "fsize": resource.getrlimit(resource.RLIMIT_FSIZE),
    "effkit": hashlib.sha256(Path(_pipelines.__file__).read_bytes()).hexdigest(),
    "tmp": sorted(os.listdir("/tmp")),
    "home": sorted(os.listdir(os.path.expanduser("~"))),
    "uid": os.getuid(),
    "mounts": sorted(line.split()[4] for line in open("/proc/self/mountinfo")),
}
raise RuntimeError("FINGERPRINT " + json.dumps(_fp))
"""


def _parse(message: str) -> dict:
    return json.loads(message.split("FINGERPRINT ", 1)[1].splitlines()[0])


@pytest.mark.skipif(not is_root(), reason="needs root: without it no worker has a view of its own")
def test_lesson2s_probe_and_timed_workers_show_learner_code_the_same_fingerprint(tmp_path):
    from grader.sandbox.supervisor import WorkerFailed, start_worker

    with ProbeSession(
        "grader.assignments.lesson2.probes",
        [("setup", "import os\n")],
        [("probe", FINGERPRINT)],
        [],
    ) as s:
        s.start()
        probe = _parse(s.load_errors[0]["message"])
    workdir = tmp_path / "grading"
    workdir.mkdir(mode=0o700)
    (workdir / "exposed").mkdir(mode=0o755)  # grader.timed.protocol's Reveal: empty until loaded
    config = {
        "assignment_module": "grader.assignments.lesson2.runtime",
        "device": "cpu",
        "role": "learner",
    }
    # pinned to one core with one thread, as lessons 2-3's CPU specs grade (GradingSpec.cpu_cores)
    w = start_worker("learner", workdir, config, cpu_cores=1, inputs=workdir / "exposed")
    try:
        w.expect("ready", 120, "starting up")
        w.send(cmd="load", cells=[("fingerprint", FINGERPRINT)], object_name="FastPipeline")
        with pytest.raises(WorkerFailed) as failed:
            w.expect("loaded", 60, "taking the fingerprint")
    finally:
        w.close()
    timed = _parse(str(failed.value))
    assert probe["inputs"] == [] and probe["env"]["EFFKIT_GRADER_DATA"] == "/tmp/grader-inputs"
    env = {k for k in {*timed["env"], *probe["env"]} if timed["env"].get(k) != probe["env"].get(k)}
    assert {k: (timed["env"].get(k), probe["env"].get(k)) for k in env} == {}
    assert {k: (v, probe[k]) for k, v in timed.items() if v != probe[k]} == {}
