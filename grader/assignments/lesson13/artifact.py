"""Lesson 13: the learner's ONNX file, validated as untrusted input before anything runs it.

Every field of the parsed model is walked against an allow-list (``ALLOWED``) and only the clean
re-serialized copy reaches onnxruntime. Runs only in the sandboxed server, never in the grader's
process. A new ONNX feature is refused until added to ``ALLOWED`` on purpose.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from grader.assignments.lesson13.slo_task import MAX_BYTES  # the worker caps files by it too
from grader.kit.checks import CheckFailed, expect

STANDARD_DOMAINS = ("", "ai.onnx")
INPUT, OUTPUT = "features", "logits"
_STRINGS = {"metadata_props", "doc_string"}  # free text: allowed, then stripped before onnxruntime
ALLOWED = {  # message type -> the fields that may be set; every other field is refused
    "onnx.ModelProto": {
        "ir_version",
        "opset_import",
        "producer_name",
        "producer_version",
        "domain",
        "model_version",
        "graph",
    }
    | _STRINGS,
    "onnx.OperatorSetIdProto": {"domain", "version"},
    "onnx.GraphProto": {"node", "name", "initializer", "input", "output", "value_info"} | _STRINGS,
    "onnx.NodeProto": {"input", "output", "name", "op_type", "domain", "attribute"} | _STRINGS,
    "onnx.AttributeProto": {
        "name",
        "type",
        "f",
        "i",
        "s",
        "t",
        "floats",
        "ints",
        "strings",
        "tensors",
        "doc_string",
    },
    "onnx.TensorProto": {
        "dims",
        "data_type",
        "float_data",
        "int32_data",
        "int64_data",
        "double_data",
        "uint64_data",
        "raw_data",
        "name",
        "doc_string",
        "data_location",
    },
    "onnx.ValueInfoProto": {"name", "type"} | _STRINGS,
    "onnx.TypeProto": {"tensor_type", "denotation"},
    "onnx.TypeProto.Tensor": {"elem_type", "shape"},
    "onnx.TensorShapeProto": {"dim"},
    "onnx.TensorShapeProto.Dimension": {"dim_value", "dim_param", "denotation"},
    "onnx.StringStringEntryProto": {"key", "value"},
}
# numeric element types only (no STRING: variable-length data, no use here)
_DTYPES = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16}
_ATTR_TYPES = {1, 2, 3, 4, 6, 7, 8, 9}  # FLOAT INT STRING TENSOR FLOATS INTS STRINGS TENSORS


@dataclass
class Checked:
    model: object  # onnx.ModelProto
    ops: dict[str, int]  # op type -> count
    clean: bytes = (
        b""  # what onnxruntime is given: the checked model, doc strings and metadata stripped
    )


def _kind(raw: bytes) -> str:
    if raw[:1] == b"\x80" or raw[:2] in (b"(d", b"}q", b"(l"):
        return "a Python pickle"
    if raw[:4] == b"PK\x03\x04":
        return "a zip archive (torch.save writes these: a pickle inside)"
    if len(raw) > 9 and raw[8:9] == b"{" and int.from_bytes(raw[:8], "little") < len(raw):
        return "a safetensors file"
    return ""


@functools.cache
def _max_opset() -> int:
    import onnx

    return onnx.defs.onnx_opset_version()


def _values(kind: str, name: str, value) -> bool:
    """The values an allowed field may take, where not every value is safe."""
    if kind == "onnx.TensorProto":
        return value == 0 if name == "data_location" else name != "data_type" or value in _DTYPES
    if kind == "onnx.NodeProto" and name == "domain":
        return value in STANDARD_DOMAINS
    if kind == "onnx.OperatorSetIdProto":
        return value in STANDARD_DOMAINS if name == "domain" else 1 <= value <= _max_opset()
    if kind == "onnx.AttributeProto" and name == "type":
        return value in _ATTR_TYPES
    return True


def _repeated(fd) -> bool:
    # protobuf >= 6 has is_repeated and dropped label; older versions have only label (3: repeated)
    return fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == 3


def refused_field(msg, path: str = "model") -> str:
    """The path of the first field of ``msg`` outside the allow-list ('' when every field is allowed)."""
    from google.protobuf import unknown_fields

    kind = msg.DESCRIPTOR.full_name
    if len(unknown_fields.UnknownFieldSet(msg)):
        return f"{path}.<a field number this grader's ONNX does not know>"
    for fd, value in msg.ListFields():
        if fd.name not in ALLOWED.get(kind, ()):
            return f"{path}.{fd.name}"
        items = list(value) if _repeated(fd) else [value]
        for i, item in enumerate(items):
            where = f"{path}.{fd.name}" + (f"[{i}]" if _repeated(fd) else "")
            if fd.message_type is not None:
                bad = refused_field(item, where)
                if bad:
                    return bad
            elif not _values(kind, fd.name, item):
                named = (
                    fd.enum_type.values_by_number.get(item) if fd.enum_type is not None else None
                )
                return (
                    f"{where} = {named.name}"
                    if named is not None
                    else f"{where} to a value it does not allow"
                )
    return ""


def _strip(msg) -> None:
    """Doc strings and metadata removed everywhere: free text onnxruntime has no need to read."""
    for fd, value in msg.ListFields():
        if fd.name in _STRINGS:
            msg.ClearField(fd.name)
        elif fd.message_type is not None:
            for item in value if _repeated(fd) else [value]:
                _strip(item)


def _dims(value_info) -> list:
    shape = value_info.type.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in shape.dim]


def validate(raw: bytes, dim: int, classes: int) -> Checked:
    import onnx

    expect(
        0 < len(raw) <= MAX_BYTES,
        f"the file is {len(raw)} bytes; the grader accepts 1 byte to {MAX_BYTES >> 20} MiB",
    )
    kind = _kind(raw)
    expect(
        not kind,
        f"the file you wrote is {kind}, not an ONNX model: the grader never unpickles anything and "
        f"serves ONNX only. Export with torch.onnx.export, then quantize the .onnx file",
    )
    try:
        model = onnx.load_model_from_string(raw)
    except Exception as err:  # noqa: BLE001  (any parse error is the file's)
        raise CheckFailed(
            f"the file is not an ONNX protobuf ({type(err).__name__}): write the model with "
            "torch.onnx.export or onnx.save"
        ) from None
    bad = refused_field(model)
    expect(
        not bad,
        f"the model sets {bad}: the grader does not serve that. It serves tensors stored inline (no "
        "external data: onnx.save(..., save_as_external_data=False)) and operators and opsets of the "
        "standard ONNX domain (those outside the standard ONNX domain: custom, contrib and Python ops, "
        "are refused; onnxruntime.quantization.quantize_dynamic writes standard ones: "
        "DynamicQuantizeLinear, MatMulInteger); no sparse tensors, string tensors, subgraphs (If, Loop, "
        "Scan), local functions or training info",
    )
    expect(
        model.ir_version <= onnx.IR_VERSION,
        f"the model's IR version {model.ir_version} is newer than the grader's",
    )
    graph = model.graph
    try:
        onnx.checker.check_model(model)
    except Exception as err:  # noqa: BLE001
        raise CheckFailed(
            f"onnx.checker refuses the model: {str(err).splitlines()[0][:200]}"
        ) from None
    inits = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    expect(
        [i.name for i in inputs] == [INPUT] and [o.name for o in graph.output] == [OUTPUT],
        f"the model's inputs are {[i.name for i in inputs]} and outputs {[o.name for o in graph.output]}; the "
        f"grader sends {INPUT!r} and reads {OUTPUT!r}: pass input_names=[{INPUT!r}], "
        f"output_names=[{OUTPUT!r}] to torch.onnx.export",
    )
    for info, last, what in ((inputs[0], dim, "input"), (graph.output[0], classes, "output")):
        elem = info.type.tensor_type.elem_type
        expect(
            elem == onnx.TensorProto.FLOAT,
            f"the {what} {info.name!r} is "
            f"{onnx.TensorProto.DataType.Name(elem)}; the grader sends and reads float32 (quantize the weights "
            "inside the model, not its interface)",
        )
        dims = _dims(info)
        expect(
            len(dims) == 2 and dims[1] == last,
            f"the {what} {info.name!r} has shape {dims}; expected [batch, {last}]",
        )
        expect(
            not isinstance(dims[0], int),
            f"the {what} {info.name!r} has a fixed batch size {dims[0]}: a "
            "server batches requests. Export with a free batch dimension (dynamic_shapes=({0: 'batch'},) "
            "with dynamo=True, or dynamic_axes)",
        )
    ops: dict[str, int] = {}
    for n in graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    clean = onnx.ModelProto()
    clean.CopyFrom(model)
    _strip(clean)
    return Checked(model, ops, clean.SerializeToString())


def session(raw: bytes):
    """An onnxruntime session on these bytes: one thread, sequential, default graph optimisations."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3  # warnings on stderr would zero an nbgrader cell
    return ort.InferenceSession(raw, sess_options=opts, providers=["CPUExecutionProvider"])
