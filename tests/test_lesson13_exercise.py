"""Lesson 13's exercise, graded out of the kernel: an ONNX file the grader validates as untrusted input,
serves in onnxruntime in a sandboxed grader-only worker, and times against its own fp32 export.

The reference's full marks and the stub's 0 go through the sandbox in the instructor cycle
(tests/test_instructor_cycle.py). Here the reference and wrong submissions (fixed recipes among them:
the sensitive layer is drawn per grading) are graded in this process on their cell data: the probe the
worker would run, then the parent's checks on the bytes it returns (the sandboxed path is the
reference's). The validation of hostile files needs no model: small ONNX graphs built here.
"""

import os
import pickle
import random

import numpy as np
import pytest
import torch
from exercise_cells import InProcess, grade_here, reference_cells  # noqa: E402
from onnx import TensorProto, helper

from grader import assignments
from grader.assignments.lesson13 import artifact, slo_task
from grader.assignments.lesson13 import probes as lesson13_probes
from grader.sandbox.channel import ChannelError, Endpoint
from grader.scoring.checks import CheckFailed

LESSON = "lesson13"
GRADED = ["test_artifact", "test_accuracy", "test_latency"]
A = assignments.get("lesson13")


# -- plausible wrong submissions, graded on the grader's own model and server ----------------------

_EXPORT = dict(reference_cells(LESSON))["export_for_slo"]
# the reference up to its measurement: the fp32 export, `predictions`, fp32's calibration predictions
_EXPORTED = _EXPORT[: _EXPORT.index("    # per-layer sensitivity")]
assert _EXPORTED.endswith("reference = predictions(fp32_path)\n")
_MATMULS = '    names = [n.name for n in onnx.load(fp32_path).graph.node if n.op_type in ("Gemm", "MatMul")]\n'


def _fixed_recipe(exclude: str) -> str:
    """A submission that quantizes every matmul but a fixed choice, measuring nothing."""
    return (
        _EXPORTED
        + _MATMULS
        + f"    quantize_dynamic(fp32_path, path, weight_type=QuantType.QInt8, nodes_to_exclude={exclude})\n"
    )


# seed 8 draws the planted activations at the input of Linear 2 (a hidden layer); seed 7 draws the
# head, the one grading in six where the old fixed recipe is right (tests below pin both)
SEED, HEAD_SEED = 8, 7
SUBMISSIONS = {
    # the reference: measures each layer's sensitivity, keeps the sensitive one in fp32
    "reference": (
        _EXPORT,
        {"test_artifact": True, "test_accuracy": True, "test_latency": True},
        "P95 ratio",
    ),
    # the recipe this exercise used to accept on every grading: the head in fp32, the rest int8
    "exclude_the_head": (
        _fixed_recipe('[names[-1], names[-1] + "_MatMul"]'),
        {"test_artifact": True, "test_accuracy": False, "test_latency": False},
        "changes from one grading to the next",
    ),
    # another fixed guess: a middle hidden layer in fp32
    "exclude_a_fixed_hidden_layer": (
        _fixed_recipe('[names[3], names[3] + "_MatMul"]'),
        {"test_artifact": True, "test_accuracy": False, "test_latency": False},
        "layer by layer",
    ),
    # the fp32 model exported as it is (quantize nothing): valid and accurate, but it *is* the baseline
    "fp32_unchanged": (
        _EXPORTED.replace('fp32_path = path + ".fp32.onnx"', "fp32_path = path"),
        {"test_artifact": True, "test_accuracy": True, "test_latency": False},
        "An fp32 export is the baseline itself",
    ),
    # every matmul quantized: the sensitive layer's massive activations wipe out the rest
    "quantize_everything": (
        _fixed_recipe("[]"),
        {"test_artifact": True, "test_accuracy": False, "test_latency": False},
        "huge activations",
    ),
    # the input named "input" (torch.onnx's default is the argument's name): the grader cannot feed it
    "wrong_input_name": (
        _EXPORT.replace('input_names=["features"]', 'input_names=["input"]').replace(
            '{"features": inputs', '{"input": inputs'
        ),
        {g: False for g in GRADED},
        "input_names=['features']",
    ),
    # another model: a linear classifier trained on the calibration rows, exported validly; fast, and
    # the task's oracle is linear, but it is not the grader's model: refused on agreement
    "another_model": (
        "def export_for_slo(model, calibration, path):\n"
        "    x, y = calibration\n"
        "    torch.manual_seed(0)\n"
        "    small = torch.nn.Linear(x.shape[1], 8)\n"
        "    opt = torch.optim.Adam(small.parameters(), lr=1e-2)\n"
        "    for _ in range(300):\n"
        "        opt.zero_grad()\n"
        "        torch.nn.functional.cross_entropy(small(x), y).backward()\n"
        "        opt.step()\n"
        "    torch.onnx.export(small.eval(), (x[:2],), path, input_names=['features'], "
        "output_names=['logits'], dynamic_shapes=({0: 'batch'},), dynamo=True, external_data=False)\n",
        {"test_artifact": True, "test_accuracy": False, "test_latency": False},
        "not for another one",
    ),
    # the planted units are constants: folded into the next layer's bias (and dropped) they give back
    # the plain MLP, which quantizes everywhere with fp32's predictions and beats the grader's own int8,
    # measuring nothing. Same predictions, but not the given model's layers: refused on its file
    "fold_the_planted_units": (
        "def export_for_slo(model, calibration, path):\n"
        "    linears = [m for m in model if isinstance(m, torch.nn.Linear)]\n"
        "    keep = [torch.ones(linears[0].in_features, dtype=torch.bool)]\n"
        "    with torch.no_grad():\n"
        "        for before, after in zip(linears, linears[1:]):\n"
        "            const = (before.weight == 0).all(1) & (before.bias > 0)  # ReLU(b): a constant\n"
        "            after.bias += after.weight[:, const] @ before.bias[const]\n"
        "            keep.append(~const)\n"
        "        keep.append(torch.ones(linears[-1].out_features, dtype=torch.bool))\n"
        "        for i, m in enumerate(linears):\n"
        "            m.weight = torch.nn.Parameter(m.weight[keep[i + 1]][:, keep[i]])\n"
        "            m.bias = torch.nn.Parameter(m.bias[keep[i + 1]])\n"
        "    x = calibration[0]\n"
        "    torch.onnx.export(model.eval(), (x[:2],), path + '.fp32.onnx', input_names=['features'], "
        "output_names=['logits'], dynamic_shapes=({0: 'batch'},), dynamo=True, external_data=False)\n"
        "    quantize_dynamic(path + '.fp32.onnx', path, weight_type=QuantType.QInt8)\n",
        {"test_artifact": True, "test_accuracy": False, "test_latency": False},
        "do not retrain or rewrite it",
    ),
    # torch.save: a pickle in a zip, refused before anything opens it
    "pickled_model": (
        "def export_for_slo(model, calibration, path):\n    torch.save(model, path)\n",
        {g: False for g in GRADED},
        "never unpickles",
    ),
}


def test_the_sensitive_layer_is_drawn_per_grading_over_every_layer_the_head_included():
    layers = [slo_task.draw_planting(random.Random(s))[3] for s in range(200)]
    assert set(layers) == set(range(1, slo_task.HIDDEN_LAYERS + 1)), sorted(set(layers))
    assert (layers[SEED], layers[HEAD_SEED]) == (2, slo_task.HIDDEN_LAYERS)
    # no one layer is drawn so often that a fixed recipe would pass most gradings
    assert max(layers.count(k) for k in set(layers)) < 0.3 * len(layers)
    # nor do the model's shapes say which layer it is: every draw gives the same widths, the same function
    small = slo_task.build([slo_task.DIM, 16, 16, 16, slo_task.CLASSES]).eval()
    x = torch.randn(32, slo_task.DIM)
    planted = [slo_task.with_massive_activations(small, 1, 3, 2048.0, k) for k in (1, 2, 3)]
    assert len({tuple(slo_task.widths_of(net)) for net in planted}) == 1
    for net in planted:
        assert torch.allclose(net(x), small(x), atol=1e-2), (net(x) - small(x)).abs().max()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SUBMISSIONS))
def test_submissions_earn_what_they_deserve_with_a_hint(name):
    source, passes, words = SUBMISSIONS[name]
    verdicts = grade_here(LESSON, reference_cells(LESSON, export_for_slo=source), GRADED, seed=SEED)
    assert {g: v.passed for g, v in verdicts.items()} == passes, {
        g: v.reason for g, v in verdicts.items()
    }
    failed = [v.reason for v in verdicts.values() if not v.passed]
    assert not failed or words in failed[0], failed[0]
    assert failed or words in " ".join(verdicts["test_latency"].lines)


@pytest.mark.slow
def test_the_fixed_head_recipe_is_right_only_when_the_head_is_drawn():
    """Its accuracy on the grading that draws the head: the draw, not the recipe, failed it above."""
    source = SUBMISSIONS["exclude_the_head"][0]
    verdicts = grade_here(
        LESSON, reference_cells(LESSON, export_for_slo=source), ["test_accuracy"], seed=HEAD_SEED
    )
    assert verdicts["test_accuracy"].passed, verdicts["test_accuracy"].reason


# -- the file as untrusted input: each class refused before onnxruntime opens it -------------------

DIM, CLASSES = 4, 3


def _model(input_name="features", batch="batch", domain="", external=False) -> bytes:
    weight = helper.make_tensor(
        "w", TensorProto.FLOAT, [DIM, CLASSES], np.ones(DIM * CLASSES, np.float32).tolist()
    )
    if external:
        weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[DIM, CLASSES])
        weight.data_location = TensorProto.EXTERNAL
        weight.external_data.add(key="location", value="../../etc/passwd")
    node = helper.make_node("MatMul", [input_name, "w"], ["logits"], domain=domain)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [batch, DIM])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, CLASSES])],
        [weight],
    )
    opsets = [helper.make_opsetid("", 20)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def test_a_valid_small_model_passes_and_runs_from_memory():
    checked = artifact.validate(_model(), DIM, CLASSES)
    assert checked.ops == {"MatMul": 1}
    out = artifact.session(_model()).run(["logits"], {"features": np.ones((2, DIM), np.float32)})[0]
    assert out.shape == (2, CLASSES) and float(out[0, 0]) == DIM


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"", "1 byte to"),
        (b"\0" * (artifact.MAX_BYTES + 1), "1 byte to"),
        (pickle.dumps({"w": [1.0]}), "a Python pickle"),
        (b"PK\x03\x04" + b"\0" * 64, "zip archive"),
        ((30).to_bytes(8, "little") + b'{"w": {"dtype": "F32"}}      ' + b"\0" * 16, "safetensors"),
        (b"\xff\xfe this is not a protobuf", "not an ONNX protobuf"),
        (_model(external=True), "external data"),
        (_model(domain="com.example.custom"), "outside the standard ONNX domain"),
        (_model(input_name="input"), "input_names=['features']"),
        (_model(batch=1), "fixed batch size"),
    ],
)
def test_hostile_or_malformed_files_are_refused_with_the_reason(raw, words):
    with pytest.raises(CheckFailed, match=None) as err:
        artifact.validate(raw, DIM, CLASSES)
    assert words in str(err.value), str(err.value)


def test_an_oversized_file_is_refused_before_its_bytes_are_read():
    r, w = os.pipe()
    try:
        os.write(w, b'{"event": "result", "data": {}, "_blobs": [%d]}\n' % (artifact.MAX_BYTES + 1))
        with pytest.raises(ChannelError) as err:
            Endpoint(r, w).receive(5, max_blob=artifact.MAX_BYTES)
        assert err.value.kind == "too_big"
    finally:
        os.close(r)
        os.close(w)


def test_a_link_instead_of_a_file_is_not_followed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = (
        "def export_for_slo(model, calibration, path):\n    os.symlink('/etc/hostname', path)\n"
    )
    worker = InProcess(
        A, lesson13_probes, [("export_for_slo", "import os\n" + source)], strict=True
    )
    net = slo_task.build([DIM, 8, CLASSES])
    calib = {
        "x": slo_task.tensor_plain(slo_task.draw(1)["x_calib"][:4]),
        "y": slo_task.tensor_plain(slo_task.draw(1)["y_calib"][:4]),
    }
    data, blobs = lesson13_probes.probe_export(worker, slo_task.to_plain(net), calib)
    assert "not a regular file" in data["file"] and blobs == []
