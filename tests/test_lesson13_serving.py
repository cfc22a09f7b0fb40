"""Lesson 13: the learner's ONNX file is parsed and run only in a sandboxed grader-only worker, under a
deadline, through an allow-list validator; the answers to the timed requests are the ones judged.

Issue 41, classes 4 and 5: a graph that read a file of the grader's through a field the old validator
missed (a sparse ``Constant``), a graph that kept the root grader busy for minutes, and a graph that
answered correctly only at the accuracy check's batch shape and fast-but-wrong at the timed one.
"""

import multiprocessing
import random
import time

import numpy as np
import onnx
import pytest
from exercise_cells import InProcess, grade_in_process, solution_cells, solution_path  # noqa: E402  (tests/ is on sys.path)
from onnx import TensorProto, helper, numpy_helper
from test_lesson13_exercise import _EXPORT  # noqa: E402

from grader import assignments
from grader.assignments.lesson13 import artifact
from grader.assignments.lesson13 import probes as lesson13_probes
from grader.scoring.checks import CheckFailed

A = assignments.get("lesson13")
SOLUTION = solution_path("lesson13")
GRADED = ["test_artifact", "test_accuracy", "test_latency"]
DIM, CLASSES = 4, 3


def _graph(nodes, inits=(), opsets=(("", 20),)) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", DIM])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES])],
        list(inits),
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _external(name: str, location: str) -> TensorProto:
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[DIM * CLASSES])
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    return t


def _sparse_external(location="secret.bin") -> onnx.ModelProto:
    """The field the old validator missed: a Constant's sparse_value whose values live in a file."""
    indices = numpy_helper.from_array(np.arange(DIM * CLASSES, dtype=np.int64), "i")
    sparse = helper.make_sparse_tensor(_external("v", location), indices, [DIM, CLASSES])
    return _graph(
        [
            helper.make_node("Constant", [], ["w"], sparse_value=sparse),
            helper.make_node("MatMul", ["features", "w"], ["logits"]),
        ]
    )


def _plain() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((DIM, CLASSES), np.float32), "w")
    return _graph([helper.make_node("MatMul", ["features", "w"], ["logits"])], [w])


def _training_info() -> onnx.ModelProto:
    m = _plain()
    m.training_info.add().initialization.CopyFrom(
        helper.make_graph([], "init", [], [], [_external("t", "secret.bin")])
    )
    return m


def _segment() -> onnx.ModelProto:
    m = _plain()
    m.graph.initializer[0].segment.begin = 0
    return m


def _unknown_field() -> bytes:
    # field 99 of ModelProto, a length-delimited value: unknown to this onnx, maybe known to another parser
    return _plain().SerializeToString() + b"\x9a\x06\x0bsecret.bin!"


def _string_tensor() -> onnx.ModelProto:
    m = _plain()
    m.graph.initializer.append(helper.make_tensor("s", TensorProto.STRING, [1], [b"secret.bin"]))
    return m


def _foreign_opset() -> onnx.ModelProto:
    return _graph(
        _plain().graph.node, _plain().graph.initializer, opsets=(("", 20), ("com.microsoft", 1))
    )


@pytest.mark.parametrize(
    "make",
    [_sparse_external, _training_info, _segment, _unknown_field, _string_tensor, _foreign_opset],
)
def test_the_validator_is_an_allow_list_and_names_no_file(make):
    made = make()
    raw = made if isinstance(made, bytes) else made.SerializeToString()
    with pytest.raises(CheckFailed) as err:
        artifact.validate(raw, DIM, CLASSES)
    assert "secret" not in str(err.value), str(err.value)


def test_the_plain_graph_still_passes_and_onnxruntime_gets_the_checked_bytes():
    checked = artifact.validate(_plain().SerializeToString(), DIM, CLASSES)
    assert checked.ops == {"MatMul": 1}
    out = artifact.session(checked.clean).run(
        ["logits"], {"features": np.ones((2, DIM), np.float32)}
    )[0]
    assert out.shape == (2, CLASSES)


# -- whole gradings: the learner's file is opened only by the sandboxed server -------------------

_SAVE = "    onnx.save(m, path)\n"
_SECRET = (
    "def export_for_slo(model, calibration, path):\n"
    "    import numpy as np\n"
    "    from onnx import TensorProto, helper, numpy_helper\n"
    "    t = TensorProto(name='v', data_type=TensorProto.FLOAT, dims=[64 * 8])\n"
    "    t.data_location = TensorProto.EXTERNAL\n"
    "    t.external_data.add(key='location', value='secret.bin')\n"
    "    sp = helper.make_sparse_tensor(t, numpy_helper.from_array(np.arange(512, dtype=np.int64), 'i'), [64, 8])\n"
    "    g = helper.make_graph([helper.make_node('Constant', [], ['w'], sparse_value=sp),\n"
    "                           helper.make_node('MatMul', ['features', 'w'], ['logits'])], 'g',\n"
    "                          [helper.make_tensor_value_info('features', TensorProto.FLOAT, ['batch', 64])],\n"
    "                          [helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['batch', 8])])\n"
    "    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 20)])\n" + _SAVE
)
# standard operators only: each request multiplies 2048 x 2048 matrices 400 times (minutes per request, >4 min for one grading on any CPU)
_SLOW = (
    "def export_for_slo(model, calibration, path):\n"
    "    import numpy as np\n"
    "    from onnx import TensorProto, helper, numpy_helper\n"
    "    inits = [numpy_helper.from_array(np.array([2048, 2048], np.int64), 'big'),\n"
    "             numpy_helper.from_array(np.zeros((64, 8), np.float32), 'w')]\n"
    "    nodes = [helper.make_node('ReduceMean', ['features'], ['s'], keepdims=0),\n"
    "             helper.make_node('Expand', ['s', 'big'], ['y0'])]\n"
    "    for i in range(400):\n"
    "        nodes.append(helper.make_node('MatMul', [f'y{i}', 'y0'], [f'y{i + 1}']))\n"
    "    nodes += [helper.make_node('ReduceSum', ['y400'], ['r'], keepdims=0),\n"
    "              helper.make_node('MatMul', ['features', 'w'], ['p']),\n"
    "              helper.make_node('Add', ['p', 'r'], ['logits'])]\n"
    "    g = helper.make_graph(nodes, 'g', [helper.make_tensor_value_info('features', TensorProto.FLOAT, ['batch', 64])],\n"
    "                          [helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['batch', 8])], inits)\n"
    "    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 20)])\n" + _SAVE
)
# the fp32 export for every row but a batch's last; the last row gets zeros from a 64 x 8 matmul: at the
# accuracy check's batches of 256 nearly right, at batch 1 (the timed shape) all wrong and very fast
_SPLIT = (
    _EXPORT.split("    fp32_path = path")[0] + "    fp32_path = path + '.fp32.onnx'\n"
    "    torch.onnx.export(model.eval(), (inputs[:2],), fp32_path, input_names=['features'],\n"
    "                      output_names=['logits'], dynamic_shapes=({0: 'batch'},), dynamo=True, external_data=False)\n"
    "    import numpy as np\n"
    "    from onnx import helper, numpy_helper\n"
    "    m = onnx.load(fp32_path)\n"
    "    for n in m.graph.node:\n"
    "        n.input[:] = ['rows' if i == 'features' else i for i in n.input]\n"
    "        n.output[:] = ['full' if o == 'logits' else o for o in n.output]\n"
    "    m.graph.initializer.extend([numpy_helper.from_array(np.array([v], np.int64), k) for k, v in\n"
    "                                (('zero', 0), ('one', 1), ('end', 1 << 62))])\n"
    "    m.graph.initializer.append(numpy_helper.from_array(np.zeros((64, 8), np.float32), 'cheap_w'))\n"
    "    pre = [helper.make_node('Shape', ['features'], ['n'], start=0, end=1),\n"
    "           helper.make_node('Sub', ['n', 'one'], ['k']),\n"
    "           helper.make_node('Slice', ['features', 'zero', 'k', 'zero'], ['rows']),\n"
    "           helper.make_node('Slice', ['features', 'k', 'end', 'zero'], ['tail']),\n"
    "           helper.make_node('MatMul', ['tail', 'cheap_w'], ['cheap'])]\n"
    "    nodes = pre + list(m.graph.node) + [helper.make_node('Concat', ['full', 'cheap'], ['logits'], axis=0)]\n"
    "    del m.graph.node[:]\n"
    "    m.graph.node.extend(nodes)\n" + _SAVE
)


class _Recorder(InProcess):
    """The learner's worker, in process: remembers the bytes its export returned."""

    sent: list[bytes] = []

    def call(self, probe, timeout_s, serve=None, max_blob=None, **args):
        got = super().call(probe, timeout_s, serve, max_blob, **args)
        _Recorder.sent += got.blobs
        return got


def _grade(source: str, seed: int = 7):
    cells = solution_cells(SOLUTION, SOLUTION, export_for_slo=source)
    return grade_in_process(
        A, _Recorder(A, lesson13_probes, cells, strict=True), GRADED, random.Random(seed)
    )


def test_a_file_of_the_graders_is_never_read_and_learner_bytes_never_reach_onnx_here(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secret.bin").write_bytes(np.arange(512, dtype=np.float32).tobytes())
    import onnxruntime

    opened: list[bytes] = []
    real_session, real_load = onnxruntime.InferenceSession, onnx.load_model_from_string
    monkeypatch.setattr(
        onnxruntime,
        "InferenceSession",
        lambda raw, *a, **k: opened.append(raw) or real_session(raw, *a, **k),
    )
    monkeypatch.setattr(
        onnx,
        "load_model_from_string",
        lambda raw, *a, **k: opened.append(raw) or real_load(raw, *a, **k),
    )
    _Recorder.sent = []
    verdicts = _grade(_SECRET)
    assert _Recorder.sent and not any(raw in opened for raw in _Recorder.sent), (
        "the root process parsed learner bytes"
    )
    assert not verdicts["test_artifact"].passed
    reason = verdicts["test_artifact"].reason
    assert "sparse" in reason and "secret" not in reason, reason


def _grade_into(source, queue, open_seconds=None):
    if open_seconds is not None:  # the real deadline path at a shorter limit (read per call)
        from grader.assignments.lesson13 import checks

        checks.OPEN_SECONDS = open_seconds
    verdicts = _grade(source)
    queue.put({g: (v.passed, v.reason) for g, v in verdicts.items()})


@pytest.mark.slow
def test_a_graph_that_runs_for_minutes_fails_in_bounded_time_and_the_grading_goes_on():
    ctx = multiprocessing.get_context(
        "spawn"
    )  # a fork of a process that ran torch can hang in OpenMP
    queue = ctx.Queue()
    # What is tested is that a deadline stops the graph, not the deadline's value: the server's
    # opening deadline is 15 s here, not the lesson's 60 (~45 s of CI's untimed lane, waited out)
    child = ctx.Process(target=_grade_into, args=(_SLOW, queue, 15))
    t0 = time.monotonic()
    child.start()
    try:
        got = queue.get(timeout=240)  # ~110 s at load 6 on 2 cores with the lesson's 60 s deadline
    except Exception:  # noqa: BLE001  (queue.Empty: still busy)
        got = None
    finally:
        child.kill()
        child.join()
    assert got is not None, f"the grading was still running after {time.monotonic() - t0:.0f} s"
    assert [passed for passed, _ in got.values()] == [False, False, False], got
    assert "within" in got["test_artifact"][1], got["test_artifact"][1]


@pytest.mark.slow
def test_a_graph_that_answers_right_only_at_the_accuracy_shape_earns_no_accuracy_or_speed():
    verdicts = _grade(_SPLIT)
    got = {g: v.passed for g, v in verdicts.items()}
    assert got == {"test_artifact": True, "test_accuracy": False, "test_latency": False}, {
        g: v.reason for g, v in verdicts.items()
    }
    assert "batch 1" in verdicts["test_accuracy"].reason, verdicts["test_accuracy"].reason


def test_every_timed_answer_is_compared_with_the_same_rows_accuracy_answer():
    from grader.assignments.lesson13 import serve, server

    rng = np.random.default_rng(0)
    logits = rng.standard_normal((50, 8)).astype(np.float32)
    idx = server.plan(3, 50, rounds=2, per_round=10, warmup=5)
    assert len(idx) == 25 and not np.array_equal(idx, server.plan(4, 50, 2, 10, 5)), (
        "the rows depend on the seed"
    )
    assert serve.answers_problem(logits, idx, logits[idx].copy()) == ""
    for k, spoil in (
        (7, lambda row: row[::-1]),
        (24, lambda row: row * np.nan),
        (0, lambda row: row + 1e-2),
    ):
        answers = logits[idx].copy()
        answers[k] = spoil(answers[k])
        said = serve.answers_problem(logits, idx, answers)
        assert said.startswith("1 of the 25 requests") and f"request {k}" in said, said


def test_a_server_answer_of_another_size_is_not_read():
    from grader.assignments.lesson13 import serve
    from grader.sandbox.probe import CallResult

    good = CallResult(True, {}, [np.zeros((3, 8), np.float32).tobytes()])
    assert serve.floats(good, 0, (3, 8)).shape == (3, 8)
    assert serve.floats(good, 0, (4, 8)) is None and serve.floats(good, 1, (3, 8)) is None
    assert serve.floats(CallResult(False, {}, good.blobs), 0, (3, 8)) is None
