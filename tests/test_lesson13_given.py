"""Lesson 13: the served file must be the given model, quantized (``given.differs``), on small graphs.

The planted units are constants: folded into the next layer's bias they give back the plain MLP,
which quantizes everywhere with fp32's predictions. These graphs are small; the full grading of the
fold is ``test_lesson13_exercise.py``'s ``fold_the_planted_units`` submission.
"""

import os
import tempfile

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from grader.assignments.lesson13 import checks, given, slo_task

WIDTHS = [slo_task.DIM, 24, 24, 24, slo_task.CLASSES]
SEED, COUNT, SCALE, LAYER = 3, 3, 2048.0, 2


def _planted():
    torch.manual_seed(0)
    plain = slo_task.build(WIDTHS).eval().requires_grad_(False)
    return plain, slo_task.with_massive_activations(plain, SEED, COUNT, SCALE, LAYER)


def _layers(net):
    return [(m.weight.numpy(), m.bias.numpy()) for m in net if isinstance(m, torch.nn.Linear)]


def _dynamic(fp32: bytes, **kw) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as d, checks._quiet():
        src, dst = os.path.join(d, "a.onnx"), os.path.join(d, "b.onnx")
        with open(src, "wb") as f:
            f.write(fp32)
        quantize_dynamic(src, dst, weight_type=kw.pop("weight_type", QuantType.QInt8), **kw)
        return onnx.load(dst)


def _fold(planted, zero=False):
    """The attack: the planted constants folded into the next bias, the units dropped (or zeroed)."""
    net = slo_task.build(slo_task.widths_of(planted)) if zero else slo_task.build(WIDTHS)
    src = [m for m in planted if isinstance(m, torch.nn.Linear)]
    dst = [m for m in net if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for i, (d, s) in enumerate(zip(dst, src, strict=True)):
            rows, cols = d.weight.shape
            d.weight.copy_(s.weight[:rows, :cols])
            d.bias.copy_(s.bias[:rows])
            if i == LAYER:  # the constants' contribution, now in the bias
                d.bias += s.weight[:rows, WIDTHS[i] :].sum(1) * SCALE
                if zero:
                    d.weight[:, WIDTHS[i] :] = 0
            if zero and i == LAYER - 1:
                d.bias[WIDTHS[i + 1] :] = 0
    return net.eval().requires_grad_(False)


def test_the_given_model_passes_as_exported_and_as_onnxruntime_quantizes_it():
    from onnxruntime.quantization import QuantType

    _, planted = _planted()
    want = _layers(planted)
    fp32 = checks.export_fp32(planted)
    assert given.differs(onnx.load_model_from_string(fp32), want) == ""
    own = checks.quantize_own(fp32, LAYER)
    assert given.differs(onnx.load_model_from_string(own), want) == ""
    for kw in (
        {},
        {"per_channel": True},
        {"weight_type": QuantType.QUInt8},
        {"per_channel": True, "reduce_range": True},
    ):
        assert given.differs(_dynamic(fp32, **kw), want) == "", kw


def test_a_static_qdq_model_of_it_passes():
    """quantize_static's QDQ format: int8 weights and int32 biases behind DequantizeLinear nodes."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Rows(CalibrationDataReader):
        def __init__(self):
            self.rows = iter(
                [{"features": np.random.default_rng(0).standard_normal((8, 64), np.float32)}]
            )

        def get_next(self):
            return next(self.rows, None)

    _, planted = _planted()
    with tempfile.TemporaryDirectory() as d, checks._quiet():
        src, dst = os.path.join(d, "a.onnx"), os.path.join(d, "b.onnx")
        with open(src, "wb") as f:
            f.write(checks.export_fp32(planted))
        quantize_static(src, dst, Rows(), quant_format=QuantFormat.QDQ, per_channel=True)
        model = onnx.load(dst)
    assert any(n.op_type == "DequantizeLinear" for n in model.graph.node)
    assert given.differs(model, _layers(planted)) == ""


@pytest.mark.parametrize("zero", [False, True], ids=["units_dropped", "units_zeroed"])
def test_the_folded_model_predicts_alike_but_is_refused(zero):
    plain, planted = _planted()
    folded = _fold(planted, zero)
    x = torch.randn(64, slo_task.DIM)
    assert torch.allclose(folded(x), planted(x), atol=1e-2)  # the same function: only the file says
    for fp32 in (checks.export_fp32(folded), checks.quantize_own(checks.export_fp32(folded), 0)):
        why = given.differs(onnx.load_model_from_string(fp32), _layers(planted))
        assert why.startswith("the served model's layer ") and "do not retrain or rewrite it" in why
        assert "\n" not in why


def _graph(tensors: dict[str, np.ndarray], consts=()) -> onnx.ModelProto:
    """A graph that only holds these tensors as data: ``differs`` reads data, never runs the graph."""
    inits = [numpy_helper.from_array(v, k) for k, v in tensors.items()]
    nodes = [helper.make_node("Identity", ["features"], ["logits"])]
    nodes += [
        helper.make_node("Constant", [], [k], value=numpy_helper.from_array(v, k))
        for k, v in consts
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", 4])],
        inits,
    )
    return helper.make_model(graph)


def _int8(w: np.ndarray, scale: float, shift: int = 0):
    q = np.clip(np.round(w / scale) + shift, -127, 127).astype(np.int8)
    return {"w_quantized": q, "w_scale": np.float32(scale), "w_zero_point": np.int8(0)}


def test_a_weight_one_step_off_passes_two_steps_or_a_huge_step_do_not():
    w = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    b = np.arange(6, dtype=np.float32)
    want = [(w, b)]
    step = float(np.abs(w).max() / 127)
    assert given.differs(_graph({**_int8(w.T, step), "b": b}), want) == ""
    q = _int8(w.T, step)
    q["w_quantized"][0, 0] += 2  # two steps from the given weight
    assert "layer 0 differs" in given.differs(_graph({**q, "b": b}), want)
    zeros = {**_int8(w.T, 1e3), "b": b}  # every value one (huge) step from anything
    assert "layer 0 differs" in given.differs(_graph(zeros), want)


def test_a_changed_bias_or_an_extra_tensor_is_refused():
    w = np.random.default_rng(1).standard_normal((6, 5)).astype(np.float32)
    b = np.arange(6, dtype=np.float32)
    want = [(w, b)]
    assert "no bias of 6 values" in given.differs(_graph({"w": w, "b": b + 0.01}), want)
    for extra in ({"w": w, "b": b, "fold": b + 1}, {"w": w, "b": b, "t": np.arange(9)}):
        assert "holds tensors the model you were given does not" in given.differs(
            _graph(extra), want
        )
    const = given.differs(_graph({"w": w, "b": b}, consts=[("fold", b + 1)]), want)
    assert "fold" in const
    floats = helper.make_node("Constant", [], ["listed"], value_floats=(b + 1).tolist())
    model = _graph({"w": w, "b": b})
    model.graph.node.append(floats)
    assert "listed" in given.differs(model, want)
    assert given.differs(_graph({"w": w, "b": b, "shape": np.array([-1, 5])}), want) == ""
