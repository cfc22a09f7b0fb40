"""Lesson 3's grading at the gpu spec's model size crosses every boundary on the CPU (issue: a
bert-base-sized grading never finished sending its weights). A share of `make gpu-rehearsal`."""

import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_lesson3_at_gpu_model_size_sends_and_evaluates_its_weights():
    spec = importlib.util.spec_from_file_location("gpu_rehearsal", ROOT / "benchmarks" / "gpu_rehearsal.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.rehearse_lesson3(progress=lambda line: None)
    assert out["error"] is None, out["error"]
    assert not out["problems"], out["problems"]
    assert all(acc is not None for _, _, acc in out["runs"]) and len(out["runs"]) == 2
    # a 12 x 768 encoder: at least 85 M parameters cross, in fp32
    assert max(out["blob_bytes"]) > 340e6, out["blob_bytes"]
    if os.geteuid() == 0 and hasattr(os, "memfd_create"):  # with the freezer: commits copied off the clock
        assert out["memfd_commits"] == 4, out  # 2 chunks x 2 workers; the replay's weights use the pipe
