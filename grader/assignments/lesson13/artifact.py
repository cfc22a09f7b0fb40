"""Lesson 13: the learner's ONNX file, validated as untrusted input before anything loads it.

**What it does.** ``validate(raw, dim, classes)`` takes the bytes the worker sent (the parent
capped their size before reading them: ``MAX_BYTES``) and refuses, with a message that says why:
a pickle, a ``torch.save`` zip or a safetensors file (the grader never unpickles and serves only
ONNX); bytes protobuf cannot parse; a model ``onnx.checker`` rejects; any tensor stored as
*external data* (onnxruntime would read a file the learner named); any operator outside the
standard ONNX domain (custom ops, contrib ops, Python ops), local functions and control-flow
subgraphs; inputs and outputs other than ``features`` float32 ``[batch, dim]`` and ``logits``
float32 ``[batch, classes]`` with a free batch dimension. ``session(raw)`` then opens the bytes
in onnxruntime from memory, one thread, no custom op library registered (onnxruntime would
resolve a bytes-loaded model's external data against the working directory: hence the refusal above).

**When to use it.** By :mod:`grader.assignments.lesson13.checks`, in the grader's process only.

**Expected gain.** A learner's file is data: nothing in it can run code or reach a file here.

**Pitfalls.** onnxruntime's own parser still reads the bytes (after these checks); a crash in it
would end this grading, not leak anything (grader/README.md, lesson 13, limits).
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.assignments.lesson13.slo_task import MAX_BYTES  # the worker caps files by it too
from grader.cells import CheckFailed, expect

STANDARD_DOMAINS = ("", "ai.onnx")
INPUT, OUTPUT = "features", "logits"


@dataclass
class Checked:
    model: object  # onnx.ModelProto
    ops: dict[str, int]  # op type -> count


def _kind(raw: bytes) -> str:
    if raw[:1] == b"\x80" or raw[:2] in (b"(d", b"}q", b"(l"):
        return "a Python pickle"
    if raw[:4] == b"PK\x03\x04":
        return "a zip archive (torch.save writes these: a pickle inside)"
    if len(raw) > 9 and raw[8:9] == b"{" and int.from_bytes(raw[:8], "little") < len(raw):
        return "a safetensors file"
    return ""


def _tensors(graph):
    """Every tensor stored in ``graph``: initializers, sparse ones, constants in attributes."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors


def _dims(value_info) -> list:
    shape = value_info.type.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in shape.dim]


def validate(raw: bytes, dim: int, classes: int) -> Checked:
    import onnx

    expect(0 < len(raw) <= MAX_BYTES, f"the file is {len(raw)} bytes; the grader accepts 1 byte to {MAX_BYTES >> 20} MiB")
    kind = _kind(raw)
    expect(not kind, f"the file you wrote is {kind}, not an ONNX model: the grader never unpickles anything and "
                     f"serves ONNX only. Export with torch.onnx.export, then quantize the .onnx file")  # fmt: skip
    try:
        model = onnx.load_model_from_string(raw)
    except Exception as err:  # noqa: BLE001  (any parse error is the file's)
        raise CheckFailed(f"the file is not an ONNX protobuf ({type(err).__name__}): write the model with "
                             "torch.onnx.export or onnx.save") from None  # fmt: skip
    graph = model.graph
    external = [t.name for t in _tensors(graph) if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data)]
    expect(not external, f"tensors stored as external data ({', '.join(external[:3])}): onnxruntime would read "
                         "files next to the model. Save the model as one file (onnx.save(..., "
                         "save_as_external_data=False)); it is small enough")  # fmt: skip
    expect(not model.functions, "the model defines local functions: only plain standard ONNX operators are served")
    nested = [n.op_type for n in graph.node if any(a.type in (a.GRAPH, a.GRAPHS) for a in n.attribute)]
    expect(not nested, f"control flow with subgraphs ({', '.join(sorted(set(nested)))}): a classifier needs none")
    foreign = sorted({f"{n.domain}::{n.op_type}" for n in graph.node if n.domain not in STANDARD_DOMAINS})
    expect(not foreign, f"operators outside the standard ONNX domain ({', '.join(foreign[:4])}): custom, contrib "
                        "and Python ops are refused; onnxruntime.quantization.quantize_dynamic writes standard "
                        "ones (DynamicQuantizeLinear, MatMulInteger)")  # fmt: skip
    try:
        onnx.checker.check_model(model)
    except Exception as err:  # noqa: BLE001
        raise CheckFailed(f"onnx.checker refuses the model: {str(err).splitlines()[0][:200]}") from None
    inits = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    expect([i.name for i in inputs] == [INPUT] and [o.name for o in graph.output] == [OUTPUT],
           f"the model's inputs are {[i.name for i in inputs]} and outputs {[o.name for o in graph.output]}; the "
           f"grader sends {INPUT!r} and reads {OUTPUT!r}: pass input_names=[{INPUT!r}], "
           f"output_names=[{OUTPUT!r}] to torch.onnx.export")  # fmt: skip
    for info, last, what in ((inputs[0], dim, "input"), (graph.output[0], classes, "output")):
        elem = info.type.tensor_type.elem_type
        expect(elem == onnx.TensorProto.FLOAT, f"the {what} {info.name!r} is "
               f"{onnx.TensorProto.DataType.Name(elem)}; the grader sends and reads float32 (quantize the weights "
               "inside the model, not its interface)")  # fmt: skip
        dims = _dims(info)
        expect(len(dims) == 2 and dims[1] == last, f"the {what} {info.name!r} has shape {dims}; expected "
                                                   f"[batch, {last}]")  # fmt: skip
        expect(not isinstance(dims[0], int), f"the {what} {info.name!r} has a fixed batch size {dims[0]}: a "
               "server batches requests. Export with a free batch dimension (dynamic_shapes=({0: 'batch'},) "
               "with dynamo=True, or dynamic_axes)")  # fmt: skip
    ops: dict[str, int] = {}
    for n in graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return Checked(model, ops)


def session(raw: bytes):
    """An onnxruntime session on these bytes: one thread, sequential, default graph optimisations."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3  # warnings on stderr would zero an nbgrader cell
    return ort.InferenceSession(raw, sess_options=opts, providers=["CPUExecutionProvider"])
