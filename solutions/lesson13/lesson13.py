# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 13 — Quantized inference under a latency SLO: exercise
#
# The grader owns a classifier and a service-level objective (SLO) for it:
#
# * **latency**: served one request at a time (batch 1, one CPU thread), its **P95 latency** must be
#   lower than the fp32 model's by at least half of what int8 weights buy on the grading machine
#   (geometrically: `sqrt(g)` times lower, where `g` is the speed-up of the grader's own int8 model,
#   every layer but the sensitive one in int8, in the same run, and never less than 1.25x). int8's
#   gain at batch 1 depends on the CPU and the machine's load: 1.6x to 2.9x for this model on a busy
#   2-core AMD EPYC, 1.5x to 2.4x for an earlier, smaller version of it on the machines this course
#   was first calibrated on, so the bar is set per machine, per run;
# * **accuracy**: on rows only the grader holds, at most **1 point** below the fp32 model's, and
#   the same prediction as the fp32 model on at least 97% of them (it must be *this* model).
#
# Write `export_for_slo(model, calibration, path)`. It receives the grader's fp32 `torch.nn.Module`
# (an MLP: 64 features in, 8 logits out), a calibration set `calibration = (inputs, labels)` (512
# rows, float32 and int64) and a file path; it must **write an ONNX file at `path`**:
#
# * one input named `"features"`, float32, shape `[batch, 64]` with a **free batch dimension**;
#   one output named `"logits"`, float32, `[batch, 8]`;
# * standard ONNX operators only, in one file (no external data, no custom ops). Export with
#   `torch.onnx.export(..., dynamo=True)`; quantize with `onnxruntime.quantization.quantize_dynamic`.
#
# The model is built like many real ones: a **few activations in it are huge** (LLMs show such
# "massive activations"), at the input of one layer, and **which layer changes from one grading to
# the next** (any of the hidden layers or the head; the grader does not say). Quantizing blindly may
# cost more accuracy than the SLO allows, and so may a recipe that keeps a fixed layer in fp32:
# measure each layer's sensitivity on the calibration set (quantize one matmul at a time,
# `nodes_to_quantize`, and compare its predictions with the fp32 model's), keep in fp32 only the
# layer that matters (`nodes_to_exclude`; every layer kept costs speed), and check the whole
# quantized model against the fp32 one before you hand it in. Mind that `quantize_dynamic` rewrites
# a `Gemm` node `name` into a `MatMul` named `name + "_MatMul"` plus an `Add`.
#
# **How it is graded.** Outside your notebook. The grader trains the model on a task it draws, runs
# your function in a separate process and takes **only the file**: it refuses anything that is not
# a valid ONNX model of standard operators (a pickle, external data, a custom op, the wrong names or
# shapes), then serves it in onnxruntime in its own process, where none of your code runs. It
# measures accuracy on its held-out rows (3 points) and, only if that passes, times your model, its
# own fp32 export and its own int8 model interleaved, batch 1, P50/P95/P99 over thousands of requests
# after a warm-up (3 points); a valid file earns 2 points.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch
import onnx
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

# %% nbgrader={"grade": false, "grade_id": "export_for_slo", "locked": false, "schema_version": 3, "solution": true, "task": false}
def export_for_slo(model, calibration, path):
    """Write an ONNX file at ``path`` that meets the grader's P95 latency SLO within its accuracy budget."""
    ### BEGIN SOLUTION
    inputs, labels = calibration
    fp32_path = path + ".fp32.onnx"
    torch.onnx.export(model.eval(), (inputs[:2],), fp32_path, input_names=["features"], output_names=["logits"],
                      dynamic_shapes=({0: "batch"},), dynamo=True, external_data=False)

    def predictions(onnx_path):
        session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        return session.run(["logits"], {"features": inputs.numpy()})[0].argmax(1)

    reference = predictions(fp32_path)
    # per-layer sensitivity: int8 weights for one matmul at a time, its predictions against fp32's on
    # the calibration rows (quantize_dynamic rewrites a Gemm `name` into `name + "_MatMul"`)
    matmuls = [n.name for n in onnx.load(fp32_path).graph.node if n.op_type in ("Gemm", "MatMul")]
    alone = {}
    for name in matmuls:
        quantize_dynamic(fp32_path, path, weight_type=QuantType.QInt8, nodes_to_quantize=[name, name + "_MatMul"])
        alone[name] = (predictions(path) == reference).mean()
    print("same predictions as fp32, one matmul in int8: " + ", ".join(f"{k} {v:.1%}" for k, v in alone.items()))
    # keep the most sensitive layers in fp32, worst first, until the rest in int8 agrees with fp32: a layer
    # whose input holds a few huge activations gets one scale for the whole input, which rounds the rest to 0
    kept = []
    while True:
        quantize_dynamic(fp32_path, path, weight_type=QuantType.QInt8,
                         nodes_to_exclude=[k + suffix for k in kept for suffix in ("", "_MatMul")])
        agreement = (predictions(path) == reference).mean()
        if agreement >= 0.98 or len(kept) == len(matmuls):
            break
        kept.append(min((name for name in matmuls if name not in kept), key=alone.get))
    accuracy = (predictions(path) == labels.numpy()).mean()
    print(f"int8 except {kept}: {agreement:.1%} same predictions as fp32, calibration accuracy {accuracy:.1%}")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_artifact", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_artifact", "lesson13.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_accuracy", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_accuracy", "lesson13.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_latency", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_latency", "lesson13.ipynb")

# %% [markdown]
# ## Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., "q3": ..., "q4": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. An SLO says "P95 latency ≤ 20 ms". It means
#    (a) at least 95% of requests finish within 20 ms;
#    (b) the mean latency is at most 20 ms;
#    (c) 95% of the serving time is spent in requests under 20 ms.
# 2. Dynamic int8 quantization of the grader's sensitive layer costs accuracy because
#    (a) it was calibrated on too few rows, so its scales miss the inputs' real range;
#    (b) the layer's input gets one scale, set by its few huge activations: the rest round to 0;
#    (c) the layer's weights have outliers, which stretch their per-tensor scale and lose the rest.
# 3. On one CPU thread, serving batches of 32 requests of mixed lengths instead of single ones
#    (a) lowers every request's latency, since the weights are then read once per batch of 32;
#    (b) raises throughput and lowers latency, as long as the queue never runs dry;
#    (c) may not raise throughput (padding), and each request waits for the whole batch.
# 4. To compare two models' P95 on a shared machine:
#    (a) time 20 requests of each right after loading, and compare the two P95s;
#    (b) warm both up, alternate blocks of each (A B B A ...), give the P95 ratio an interval;
#    (c) warm both up, time thousands of A's requests, then thousands of B's, compare the P95s.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "a", "q2": "b", "q3": "c", "q4": "b"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson13.ipynb")
