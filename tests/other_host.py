"""A measured profile as another host would measure it: the doctor's rules must hold on hosts no test ran on."""

import contextlib
import json
from unittest import mock


def as_on_another_machine(p: dict, overhead: float, kernels: float) -> dict:
    """``p`` as a machine whose fixed cost per call is ``overhead`` times this one's and whose kernels do
    the same work ``kernels`` times as fast: each matmul call t becomes overhead·f + (t - f) / kernels
    (f: the floor), the step changes by what its matmuls gained or lost, in forward and backward."""
    q = json.loads(json.dumps(p))
    f = p["matmul_us_floor"]

    def call(t: float) -> float:
        return overhead * f + max(t - f, 0.0) / kernels

    q["matmul_us_floor"] = overhead * f
    q["matmul_us_work"], q["matmul_us_median"] = (
        call(p["matmul_us_work"]),
        call(p["matmul_us_median"]),
    )
    calls = p["matmul_calls_per_step"]
    per_call = p["matmul_ms"] * 1e3 / max(calls, 1)
    q["matmul_ms"] = calls * call(per_call) / 1e3
    delta = q["matmul_ms"] - p["matmul_ms"]
    compute = p["ranges_ms"]["forward"] + p["ranges_ms"]["backward"]
    for r in ("forward", "backward"):
        q["ranges_ms"][r] = max(p["ranges_ms"][r] + delta * p["ranges_ms"][r] / compute, 0.0)
    q["step_ms"] = max(p["step_ms"] + delta, 1e-6)
    return q


@contextlib.contextmanager
def in_fp32():
    """On a CPU class whose bf16 has a line of its own, plants profiled in fp32, as where bf16 does not pay: the
    precision in which the floor is the calls' fixed cost, as the model above assumes. In bf16 on an AVX512-BF16 CPU the floor's width-8 call takes
    PyTorch's small-matrix path and misses the ~14 µs oneDNN pays on every real layer's call, which the model
    would count as kernel work: that class has its own line, held by its measured profiles instead
    (test_doctor.py::test_every_plant_is_named_in_bf16_on_an_avx512_bf16_cpu)."""
    from effkit import doctor_plants, profiling
    from effkit.amp import cpu_isa

    own_line = profiling.overhead_line("bfloat16", cpu_isa()) != profiling.OVERHEAD_CALLS
    if not own_line:  # elsewhere (AMX, AVX2) the host's own precision stays under the simulation
        yield
        return
    with mock.patch.object(doctor_plants, "bf16_pays_here", lambda *a, **k: False):
        yield
