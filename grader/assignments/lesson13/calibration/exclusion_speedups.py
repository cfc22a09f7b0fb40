"""How much of int8's batch-1 speed-up survives keeping one matmul in fp32, by architecture.

    python grader/assignments/lesson13/calibration/exclusion_speedups.py HIDDEN_LAYERS WIDTH

For a redesign where the grader draws which layer is sensitive (not always the head): an untrained
MLP of the grader's shape (64 in, 8 out), exported as the grader does, quantized with
``quantize_dynamic`` excluding no layer, then each layer in turn; 16 interleaved rounds of 600
batch-1 requests per model on one thread; per-round P95(fp32) / P95(model), median and quartiles.
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))  # the repository
import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

from grader.assignments.lesson13 import checks, slo_task

hidden = int(sys.argv[1]) if len(sys.argv) > 1 else 3
width = int(sys.argv[2]) if len(sys.argv) > 2 else 512
slo_task.HIDDEN_LAYERS, slo_task.WIDTH = hidden, width
net = slo_task.build([64] + [width] * hidden + [8]).eval()
fp32 = checks.export_fp32(net)
d = tempfile.mkdtemp()
src = os.path.join(d, "f.onnx")
open(src, "wb").write(fp32)
names = [
    n.name for n in onnx.load_model_from_string(fp32).graph.node if n.op_type in ("Gemm", "MatMul")
]
models = {"fp32": src}
for k in [None] + list(range(1, len(names))):
    dst = os.path.join(d, f"q{k}.onnx")
    ex = [] if k is None else [names[k], names[k] + "_MatMul"]
    with checks._quiet():
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8, nodes_to_exclude=ex)
    models[f"excl{k}"] = dst
o = ort.SessionOptions()
o.intra_op_num_threads = 1
o.inter_op_num_threads = 1
sess = {
    k: ort.InferenceSession(v, o, providers=["CPUExecutionProvider"]) for k, v in models.items()
}
x = np.random.default_rng(0).standard_normal((600, 64)).astype(np.float32)
for s in sess.values():
    for i in range(200):
        s.run(None, {"features": x[i : i + 1]})
p95 = {k: [] for k in sess}
for r in range(16):
    for k in list(sess) if r % 2 == 0 else list(sess)[::-1]:
        s = sess[k]
        t = []
        for i in range(600):
            t0 = time.perf_counter()
            s.run(None, {"features": x[i : i + 1]})
            t.append(time.perf_counter() - t0)
        p95[k].append(np.percentile(t, 95))
b = np.array(p95["fp32"])
print(
    f"hidden {hidden} width {width} load {os.getloadavg()[0]:.1f} fp32 p95 {np.median(b) * 1e3:.3f} ms"
)
for k in sess:
    rat = b / np.array(p95[k])
    print(
        f"  {k:8s} median ratio {np.median(rat):.2f} q25-q75 {np.percentile(rat, 25):.2f}-{np.percentile(rat, 75):.2f}"
    )
