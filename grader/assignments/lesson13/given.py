"""Lesson 13: is the served file the model the learner was given, quantized, or another one?

The planted units are constants, so a learner who folds them into the next layer's bias gets the
plain trained MLP back, which quantizes everywhere without measuring anything. Every tensor of the
file is read as data (never run): each given Linear must be there, its weight within one
quantization step (int8/uint8 with its scale and zero point, per-tensor or per-channel, as
onnxruntime's quantizers write them), its bias equal; and no other tensor of more than
``SMALL`` values may be there. Runs in the grader's server, before onnxruntime opens the file.
"""

from __future__ import annotations

import base64

import numpy as np

SMALL = (
    4  # scalars, shapes and axes: tensors this small carry no layer (quantizers write such scalars)
)
BIAS_RTOL, BIAS_ATOL = 1e-5, 1e-5  # every exporter and quantizer copies fp32 biases as they are
_INTS = {2: np.uint8, 3: np.int8, 6: np.int32}  # quantized element types: TensorProto codes


def _tensors(model) -> dict[str, np.ndarray]:
    """Initializers, and every value a node's attributes hold (a Constant's too), by name: the file's data."""
    from onnx import numpy_helper

    out = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for k, node in enumerate(model.graph.node):
        for a in node.attribute:
            name = (
                node.output[0]
                if node.op_type == "Constant" and node.output
                else f"node {k} {a.name}"
            )
            if a.HasField("t"):
                out[name] = numpy_helper.to_array(a.t)
            for i, t in enumerate(a.tensors):
                out[f"{name} {i}"] = numpy_helper.to_array(t)
            if len(a.floats) or len(a.ints):
                out[name] = np.asarray(list(a.floats) or list(a.ints))
    return out


def _quant_params(model, tensors: dict) -> dict[str, tuple[str, str | None, int | None]]:
    """Quantized tensor -> (scale, zero point, axis) names, from the nodes that dequantize it or by name."""
    params: dict[str, tuple[str, str | None, int | None]] = {}
    for node in model.graph.node:
        ins = list(node.input) + [""] * 8
        if node.op_type == "DequantizeLinear":
            axis = next((a.i for a in node.attribute if a.name == "axis"), None)
            params[ins[0]] = (ins[1], ins[2] or None, axis)
        elif node.op_type == "QLinearMatMul":
            params[ins[3]] = (ins[4], ins[5] or None, None)
    for name in tensors:  # quantize_dynamic: X_quantized, X_scale, X_zero_point
        base = name.removesuffix("_quantized")
        if name not in params and base != name and base + "_scale" in tensors:
            zp = base + "_zero_point"
            params[name] = (base + "_scale", zp if zp in tensors else None, None)
    return params


def _broadcast(v: np.ndarray, shape: tuple, axis: int | None) -> np.ndarray | None:
    """A per-tensor or per-channel parameter shaped to broadcast over ``shape`` (None: it does not fit)."""
    v = np.asarray(v, np.float64)
    if v.size == 1:
        return v.reshape(())
    if v.ndim == 1 and len(shape) == 1 and shape[0] == v.size:  # a bias, per channel
        return v
    if v.ndim != 1 or len(shape) != 2:
        return None
    axes = (
        [axis % 2] if axis is not None else [1, 0]
    )  # per output channel: the last axis of [in, out]
    for ax in axes:
        if shape[ax] == v.size:
            return v.reshape((-1, 1) if ax == 0 else (1, -1))
    return None


def _floats(
    model, tensors: dict
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, set]]:
    """Each tensor as float values with the step it was stored at; each quantized one's scale and zero point."""
    params = _quant_params(model, tensors)
    out, aux = {}, {}
    for name, value in tensors.items():
        if name in params and value.dtype in _INTS.values():
            scale_name, zp_name, axis = params[name]
            scale = _broadcast(tensors.get(scale_name, np.float64(np.nan)), value.shape, axis)
            zp = _broadcast(tensors[zp_name] if zp_name else np.zeros(1), value.shape, axis)
            if scale is None or zp is None:
                continue
            aux[name] = {scale_name, zp_name} - {None}
            out[name] = (
                (value.astype(np.float64) - zp) * scale,
                np.broadcast_to(np.abs(scale), value.shape),
            )
        elif value.dtype.kind == "f":
            v = value.astype(np.float64)
            step = np.abs(v) * (2.0**-10 if value.dtype == np.float16 else 1e-6)
            out[name] = (v, step)
    return out, aux


def _weight_close(value: np.ndarray, step: np.ndarray, want: np.ndarray) -> bool:
    """Within one step of ``want``, a step no coarser than 8 bits (7 for reduce_range) need.

    The cap keeps a huge scale from making any value "one step" away; an all-zero channel, which
    onnxruntime gives scale 1, is held to its exact zeros by it.
    """
    if value.shape != want.shape:
        return False
    coarsest = np.abs(want).max() / 60.0 + 1e-12
    return bool((np.abs(value - want) <= np.minimum(step, coarsest) * 1.001 + 1e-7).all())


def _bias_close(value: np.ndarray, step: np.ndarray, want: np.ndarray) -> bool:
    """Equal to ``want``; a quantized (int32) bias within its step, a step capped far below the values."""
    if value.shape != want.shape:
        return False
    cap = 1e-3 * np.abs(want).max() + BIAS_ATOL
    tol = np.maximum(BIAS_ATOL + BIAS_RTOL * np.abs(want), np.minimum(step, cap) * 1.001)
    return bool((np.abs(value - want) <= tol).all())


def differs(model, given: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """'' when ``model`` holds exactly the given Linears ([(weight [out, in], bias [out]), ...]); else why not."""
    tensors = _tensors(model)
    floats, aux = _floats(model, tensors)
    used: set[str] = set()
    advice = "quantize the given model, do not retrain or rewrite it"
    for i, (weight, bias) in enumerate(given):
        w, b = np.asarray(weight, np.float64), np.asarray(bias, np.float64)
        found = [
            n
            for n, (v, s) in floats.items()
            if n not in used and (_weight_close(v, s, w) or _weight_close(v, s, w.T))
        ]
        same_b = [n for n, (v, s) in floats.items() if n not in used and _bias_close(v, s, b)]
        if not found or not same_b:
            what = (
                f"no weight of shape {list(w.shape)} (or its transpose) within one quantization step of "
                "the given one"
                if not found
                else f"no bias of {b.size} values equal to the given one"
            )
            return f"the served model's layer {i} differs from the model you were given: {what}; {advice}"
        used |= {found[0], same_b[0]}
    # anything else that could carry a layer (a folded bias, another weight, an int64 table cast at
    # run time) has no place in a quantized copy of the given model
    used |= {p for n in used for p in aux.get(n, ())}  # the scales and zero points of what matched
    extra = sorted(n for n, v in tensors.items() if n not in used and v.size > SMALL)
    if extra:
        return (
            f"the served model holds tensors the model you were given does not ({', '.join(extra[:3])[:160]}): "
            f"{advice}"
        )
    return ""


def given_layers(plain: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """The given model's Linears from ``slo_task.to_plain``'s form: (weight, bias) in order."""

    def arr(key):
        t = plain["tensors"][key]
        return np.frombuffer(base64.b64decode(t["b64"]), np.float32).reshape(t["shape"])

    keys = sorted({k.rsplit(".", 1)[0] for k in plain["tensors"]}, key=int)
    return [(arr(k + ".weight"), arr(k + ".bias")) for k in keys]
