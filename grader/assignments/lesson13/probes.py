"""Lesson 13, worker side: hand the grader's model to the learner's export, send back the file's bytes.

No verdict exists here; the returned file is a claim the parent validates as untrusted input.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile

from grader.assignments.lesson13 import slo_task
from grader.assignments.lesson13.slo_task import MAX_BYTES
from grader.kit.worker import probe_quiz  # noqa: F401  (the worker finds probes by name)


def probe_export(worker, model: dict, calibration: dict):
    fn = worker.ns.get("export_for_slo")
    if not callable(fn):
        raise NameError("your solution cells define no function 'export_for_slo'")
    net = slo_task.from_plain(model)
    calib = (slo_task.tensor_unplain(calibration["x"]), slo_task.tensor_unplain(calibration["y"]))
    work = tempfile.mkdtemp(prefix="slo-", dir=os.getcwd())
    # the libraries' own temporary files (quantize_dynamic's) go there too, and tqdm (torch.onnx's
    # progress bars) starts no monitor thread: writing a file here is the exercise, not evidence
    before, tempfile.tempdir = tempfile.tempdir, work
    with contextlib.suppress(ImportError):
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    path = os.path.join(work, "model.onnx")
    try:
        fn(net, calib, path)
        return _read(path)
    finally:
        tempfile.tempdir = before
        shutil.rmtree(work, ignore_errors=True)  # no litter where the worker (or a test) runs


def _read(path: str):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"file": "missing"}, []
    if not stat.S_ISREG(info.st_mode):
        return {"file": "not a regular file (a link, a folder, a FIFO?)"}, []
    if info.st_size > MAX_BYTES:
        return {"file": f"{info.st_size} bytes, over the {MAX_BYTES >> 20} MiB limit"}, []
    with open(path, "rb") as f:
        raw = f.read(MAX_BYTES + 1)
    return {"file": "ok", "size": len(raw)}, [raw]
