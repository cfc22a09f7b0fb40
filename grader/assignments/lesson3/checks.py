"""Lesson 3 - mixed precision: the notebook's checks and its grading settings.

Every entry point replays stderr on stdout: nbgrader scores a test cell with any stderr as zero.
``SETUP_SOURCE`` must stay identical to the notebook's locked ``setup`` cell.
"""

from __future__ import annotations

import math
import numbers

import torch

from effkit.amp import AmpPolicy, DeviceCaps, choose_precision
from grader.assignments.lesson3 import amp_checks as probe
from grader.assignments.lesson3.amp_reference import reference_update
from grader.assignments.lesson3.probes import policy_report
from grader.assignments.lesson3.runtime import reuses_reference as reference_reason
from grader.kit.assignment import Assignment
from grader.kit.checks import (
    GradingSpec,
    makes_code_from_data,
    quiet,
    quiz_check,
    stub_reason,
    tensor_from,
)
from grader.kit.in_notebook import grade_saved_notebook
from grader.kit.worker import CHECK_SECONDS, expect, time_limit

SETUP_SOURCE = """\
import torch

from effkit.amp import AmpPolicy, DeviceCaps
from effkit.workloads import bert"""

# The grader's own measurement settings (see grader/assignments/lesson3/README.md). The `cpu` BERT profile
# (4 layers x 256) is the smallest where bf16 pays on a CPU with AMX: at 64 wide bf16 was measured
# slower than fp32 (what made it slower was not measured). The naive recipe pads every row to 128
# tokens, so a step's cost does not depend on the sentences; batch 8 at lr 1e-3 reaches the plateau
# of the grader's task in ~32 steps (batch 16 at 2e-3 had not, after 24: 74%), and 48 steps per run
# keep a grading near 60 s.
# From scratch on purpose (the `cpu` profile now starts from the packaged MiniLM): the gate is
# calibrated on this model, and the grader's sentences are its own made-up words anyway.
_HOOKS = {"batch_size": 8, "lr": 1e-3, "model": "scratch"}
# Scored replays: honest fp32 and emulated-bf16 chunks (AVX2) replay at cosine 1.0000 and losses within 1.6%;
# native bf16 (AVX512-BF16 EPYC) less exactly: whole updates down to 0.9995, one tensor at 0.9983, one step of 12
# 11% off, which failed the reference in 2 of 21 stress gradings at a 0.999 floor. Half the rows: cosine
# 0.994-0.99999, losses 19-40% off on every step (caught by the losses, not the cosine); a layer skipped one step
# in four: its direction kept, its size 0.75x (caught by the size band, which a 0.99 floor keeps). Threat model
_TIMED = {
    "chunks_per_epoch": 4,
    "replay_scored": True,
    "replay_cosine": 0.99,
    # each tensor: 140 honest replays on the Zen 4 (35 stress gradings after the 0.99 fix) went down to 0.9968 but
    # for one attention tensor at 0.9589 (its whole update 0.9967), which failed the reference once; the size band
    # (0.8-1.25x), which catches the layer skipped one step in four (0.75x), still holds every tensor
    "replay_tensor_cosine": 0.9,
    "replay_losses": True,
}
_GPU_HOOKS = {"batch_size": 32}
SPECS = {  # name, workload profile, n_train, n_eval, n_warmup, epochs, repeats; then options
    "smoke": GradingSpec("smoke", "cpu", 384, 600, 32, 1, 2, _HOOKS, cpu_cores=1, **_TIMED),
    # Plumbing only (the gate is not calibrated for it): tests of messages and cell wiring.
    "tiny": GradingSpec("tiny", "cpu", 96, 200, 16, 1, 1, _HOOKS, **_TIMED),
    "gpu": GradingSpec(
        "gpu", "gpu", 4096, 2000, 256, 1, 3, _GPU_HOOKS, min_timeout_s=60.0, replay_scored=True
    ),
}

# Targets from measured gradings on the CPU and one H100 run (figures: benchmarks/results/grader-code-notes.md):
# a correct policy is never asked for more than a measured interval's lower end. Not yet calibrated on
# the gpu grading spec: `python -m grader calibrate` on a GPU replaces these rows.
TARGETS = {
    "cpu": {"target": 1.25, "floor": 1.1},
    "h100": {"target": 1.1, "floor": 1.0},
    "a100": {"target": 2.0, "floor": 1.2},
    "l4": {"target": 1.8, "floor": 1.15},
    "t4": {"target": 1.8, "floor": 1.15},
    "gpu": {"target": 1.5, "floor": 1.1},
    # A CPU without native bf16: fp32 is the right policy and 16-bit cannot pay (it is emulated), so
    # this row grades "your choice does not slow training down".
    "cpu-fp32": {"target": 0.9, "floor": 0.7},
}


# (caps, expected mode, why): the devices in amp_checks.POLICY_CASES (the worker asks about the same ones),
# each expected mode effkit's own rule, computed here.
CASES = tuple(
    (caps, choose_precision(caps["type"], "auto", caps=DeviceCaps(**caps)).mode, why)
    for caps, why in probe.POLICY_CASES
)


def _ok(text: str) -> None:
    print(f"  ok  {text}")


_SCALER_HINTS = (
    ("after step()", " - expected scaler.update() after scaler.step(optimizer), in every step"),
    (
        "_scale is None",
        " - expected the scaled loss back-propagated: scaler.scale(loss).backward()",
    ),
    (
        "already been called",
        " - expected scaler.unscale_(optimizer) once per step, before clipping",
    ),
)
_TRUSTED: set[int] = set()  # ids of steps the grader itself runs (the baseline's reference step)


def _call(step, model, batch, optimizer, policy, scaler, what: str, max_grad_norm: float = 1.0):
    reason = "" if id(step) in _TRUSTED else reference_reason(step)
    expect(not reason, reason)
    try:
        with time_limit(CHECK_SECONDS, what):
            loss = step(model, batch, optimizer, policy, scaler, max_grad_norm)
    except NotImplementedError:
        raise  # the untouched stub: let it say so itself
    except (
        RuntimeError,
        AssertionError,
    ) as err:  # GradScaler's own complaints: name the rule broken
        hint = next((h for key, h in _SCALER_HINTS if key in str(err)), "")
        raise AssertionError(
            f"{what}: amp_train_step raised {type(err).__name__}: {err}{hint}"
        ) from err
    expect(
        isinstance(loss, numbers.Real) and not isinstance(loss, bool),
        f"expected amp_train_step to return the loss as a Python float (float(loss.detach())), "
        f"got {type(loss).__name__}",
    )
    return float(loss)


def _judge_policy(data: dict, ok) -> None:
    """Judge a ``probes.policy_report``: every mode against effkit's rule, every scaler's device and
    enabled flag against the policy it was made for."""
    for (caps, want, why), got in zip(CASES, data["cases"], strict=True):
        expect(
            got["is_policy"], f"expected choose_policy to return an AmpPolicy, got {got['repr']}"
        )
        expect(
            got["mode"] == want and got["device_type"] == caps["type"],
            f"for {why} expected AmpPolicy({caps['type']!r}, {want!r}), got {got['repr']}",
        )
    ok("precision: bf16 where supported, fp16 on CUDA without bf16, otherwise fp32")
    for s in data["scalers"]:
        mode, device = s["mode"], s.get("device_type", "cpu")
        enabled = mode == "fp16"
        expect(
            s["is_scaler"],
            f"expected make_scaler to return a torch.amp.GradScaler, got {s['repr']}",
        )
        expect(
            s.get("device", device) == device,
            f"for AmpPolicy({device!r}, {mode!r}) expected a GradScaler for device {device!r} "
            f"(policy.device_type), got one for {s.get('device')!r}",
        )
        if device == "cuda" and enabled and not data.get("cuda"):
            continue  # without CUDA, GradScaler("cuda", enabled=True) disables itself
        expect(
            s["enabled"] == enabled,
            f"for {mode} expected a GradScaler with enabled={enabled}, got enabled={s['enabled']}"
            + (
                " (bf16 has fp32's exponent range: loss scaling only adds work)"
                if mode == "bf16"
                else ""
            )
            + (" (fp16 gradients underflow without loss scaling)" if mode == "fp16" else ""),
        )
    ok("a loss scaler only for fp16 (bf16 and fp32 need none), for the policy's device")


def check_policy(choose_policy, make_scaler) -> None:
    """bf16 where the device has it, fp16 on CUDA without bf16, else off; a scaler only for fp16."""
    with quiet():
        with time_limit(CHECK_SECONDS, "choose_policy / make_scaler"):
            data = policy_report(choose_policy, make_scaler)
        _judge_policy(data, _ok)


def _expect_update_close(got, want, what: str) -> None:
    err = probe.relative_error(got, want)
    expect(
        err < 0.1,
        f"{what}: the parameter update differs from a correct clipped step by {err:.0%} "
        f"(norm {float(got.norm()):.4g}, expected {float(want.norm()):.4g})",
    )


def _check_update(step, policy, scaler, seed: int, what: str, model=None, optimizer=None) -> float:
    """One step on the probe; the parameter change must match a correct clipped fp32 step."""
    model = model or probe.ProbeModel(seed)
    optimizer = optimizer or probe.SpyOptimizer(model.parameters())
    batch = probe.probe_batch(seed)
    want, want_loss = reference_update(model, batch, 1.0)
    before = probe.flat_params(model)
    loss = _call(step, model, batch, optimizer, policy, scaler, what)
    expect(math.isfinite(loss), f"{what}: expected a finite loss, got {loss}")
    expect(
        abs(loss - want_loss) <= 0.03 * abs(want_loss) + 1e-3,
        f"{what}: expected the loss of this batch, {want_loss:.4f}, got {loss:.4f}",
    )
    got = probe.flat_params(model) - before
    expect(bool(got.any()), f"{what}: the parameters did not change: expected an optimizer step")
    norms = optimizer.step_norms if isinstance(optimizer, probe.SpyOptimizer) else []
    if norms:
        expect(
            norms[-1] <= 1.0 * 1.02,
            f"{what}: the optimizer was stepped with gradients of norm {norms[-1]:.4g}; expected them "
            f"clipped to max_grad_norm = 1.0 (clip_grad_norm_(model.parameters(), max_grad_norm))",
        )
        expect(
            norms[-1] >= 0.5,
            f"{what}: the optimizer was stepped with gradients of norm {norms[-1]:.3g}; expected 1.0 "
            f"(= max_grad_norm): clip only after scaler.unscale_(optimizer) - clipping the loss-scaled "
            f"gradients shrinks the update by the loss scale",
        )
    _expect_update_close(got, want, what)
    expect(
        probe.grads_cleared(model),
        f"{what}: expected the gradients cleared after the step (optimizer.zero_grad()), "
        "or the next step adds to them",
    )
    return loss


def check_step(amp_train_step) -> None:
    """bf16 (no scaler): autocast forward, finite loss, a clipped update, cleared gradients."""
    with quiet():
        policy = AmpPolicy("cpu", "bf16")
        model = probe.ProbeModel(0)
        _check_update(amp_train_step, policy, policy.make_scaler(), 0, "bf16 step", model=model)
        kinds = {dt for dt, on in model.seen}
        expect(
            any(on for _, on in model.seen) and torch.bfloat16 in kinds,
            f"expected the forward pass under policy.autocast() (matmuls in torch.bfloat16), but "
            f"the model's matmuls ran in {sorted(map(str, kinds))}",
        )
        _ok("forward and loss under autocast (bf16 matmuls), finite loss returned as a float")
        _ok("gradients clipped to max_grad_norm, one optimizer step, gradients cleared")


def check_scaler(amp_train_step) -> None:
    """fp16 (simulated on the CPU): scaled backward, unscale before clip, skip on inf/NaN."""
    with quiet():
        policy = AmpPolicy("cpu", "fp16")
        scaler = probe.SpyScaler()
        model = probe.ProbeModel(1)
        optimizer = probe.SpyOptimizer(model.parameters())
        _check_update(amp_train_step, policy, scaler, 1, "fp16 step", model, optimizer)
        model.poison, before, scale = True, probe.flat_params(model), scaler.get_scale()
        _call(
            amp_train_step,
            model,
            probe.probe_batch(1),
            optimizer,
            policy,
            scaler,
            "a step with NaN gradients",
        )
        changed = int((probe.flat_params(model) != before).sum())
        expect(
            changed == 0,
            f"a step with inf/NaN gradients changed {changed} parameter values; expected the "
            "update skipped (scaler.step(optimizer) skips it; optimizer.step() does not)",
        )
        expect(
            scaler.get_scale() < scale,
            f"after a step with inf/NaN gradients expected the loss scale to back off from {scale:g} to "
            f"{scale / 2:g} (scaler.update()), got {scaler.get_scale():g}",
        )
        calls = scaler.calls
        expect("scale" in calls, f"expected scaler.scale(loss).backward(); the scaler saw {calls}")
        expect(
            "unscale_" in calls
            and "step" in calls
            and calls.index("unscale_") < calls.index("step"),
            f"expected scaler.unscale_(optimizer) before clipping and scaler.step(optimizer); "
            f"the scaler saw {calls}",
        )
        expect(
            calls[-1:] == ["update"],
            f"expected scaler.update() after scaler.step(); the scaler saw {calls}",
        )
        _ok("fp16: scaled backward, unscale_ before clipping, scaler.step and scaler.update")
        model.poison = False
        _check_update(
            amp_train_step, policy, scaler, 1, "the step after a skipped one", model, optimizer
        )
        _ok("a step with inf/NaN gradients is skipped, the loss scale backs off, training goes on")


def check_hidden(choose_policy, make_scaler, amp_train_step) -> None:
    """Other seeds, AdamW, the learner's own scaler for fp16, several steps in a row."""
    with quiet():
        for seed in (3, 4):
            _check_update(
                amp_train_step,
                AmpPolicy("cpu", "off"),
                torch.amp.GradScaler("cpu", enabled=False),
                seed,
                f"an fp32 step (seed {seed})",
            )
        policy = choose_policy(DeviceCaps("cpu", "cpu", bf16=True))
        model = probe.ProbeModel(5)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        scaler = make_scaler(policy)
        losses = [
            _call(
                amp_train_step,
                model,
                probe.probe_batch(5),
                optimizer,
                policy,
                scaler,
                f"step {i + 1}",
            )
            for i in range(8)
        ]
        expect(
            all(map(math.isfinite, losses)) and losses[-1] < losses[0],
            f"expected 8 AdamW steps on one batch to lower the loss, got {losses[0]:.3f} -> {losses[-1]:.3f}",
        )
        fp16 = make_scaler(AmpPolicy("cpu", "fp16"))
        model, scale = probe.ProbeModel(6), fp16.get_scale()
        model.poison = True
        before = probe.flat_params(model)
        _call(
            amp_train_step,
            model,
            probe.probe_batch(6),
            torch.optim.SGD(model.parameters(), lr=0.1),
            AmpPolicy("cpu", "fp16"),
            fp16,
            "your fp16 scaler on NaN gradients",
        )
        expect(
            bool((probe.flat_params(model) == before).all()) and fp16.get_scale() < scale,
            "with your make_scaler's fp16 scaler, expected a NaN step skipped and the scale reduced",
        )


def grade_performance(notebook: str = "lesson3.ipynb") -> float | None:
    """The performance check: see :func:`grader.scoring.perf.grade_saved_notebook`."""
    return grade_saved_notebook(notebook)


# -- out of the kernel (grader.scoring.checks): the worker runs the learner's functions on probe objects and
# returns parameters and observations; every update is recomputed here from the parameters before it.
class _Remote:
    def __init__(self, ctx):
        self.ctx, self.n = ctx, 0
        self.ran: set[str] = set()  # effkit's own answers seen running inside learner code

    def call(self, probe_name: str, what: str, **args):
        r = self.ctx.session.call(probe_name, CHECK_SECONDS + 10, **args)
        if not r.ok:
            hint = next((h for key, h in _SCALER_HINTS if key in r.failure), "")
            raise AssertionError(
                stub_reason(r.failure) or f"{what}: amp_train_step {r.failure}{hint}"
            )
        ran = r.data.get("reference_ran") if isinstance(r.data, dict) else None
        self.ran |= {str(n)[:40] for n in ran} if isinstance(ran, list) else set()
        return r

    def setup(self, seed: int, mode: str, scaler: str, optimizer: str) -> tuple[str, torch.Tensor]:
        self.n += 1
        key = f"s{self.n}"
        r = self.call(
            "setup", "setting up", key=key, seed=seed, mode=mode, scaler=scaler, optimizer=optimizer
        )
        self.scale = r.data.get("scale")
        return key, tensor_from(r.data["params"], r.blobs[0])

    def step(
        self, key: str, batch_seed: int, what: str, poison: bool = False
    ) -> tuple[dict, torch.Tensor]:
        r = self.call("step", what, key=key, batch_seed=batch_seed, poison=poison)
        loss = r.data.get("loss", {})
        expect(
            loss.get("type") == "number",
            f"expected amp_train_step to return the loss as a Python float (float(loss.detach())), "
            f"got {loss.get('type')}",
        )
        return r.data, tensor_from(r.data["params"], r.blobs[0])


def _model_at(params: torch.Tensor, seed: int) -> probe.ProbeModel:
    model = probe.ProbeModel(seed)
    torch.nn.utils.vector_to_parameters(params.clone(), model.parameters())
    return model


def _judge_update(seed, batch_seed, before, data, after, what) -> None:
    """The parent's reference step from ``before``; the worker's ``after`` must match it."""
    want, want_loss = reference_update(_model_at(before, seed), probe.probe_batch(batch_seed), 1.0)
    loss = data["loss"]["value"]
    expect(
        loss is not None and math.isfinite(loss),
        f"{what}: expected a finite loss, got {data['loss'].get('repr')}",
    )
    expect(
        abs(loss - want_loss) <= 0.03 * abs(want_loss) + 1e-3,
        f"{what}: expected the loss of this batch, {want_loss:.4f}, got {loss:.4f}",
    )
    got = after - before
    expect(bool(got.any()), f"{what}: the parameters did not change: expected an optimizer step")
    if data.get("norm") is not None:
        expect(
            data["norm"] <= 1.02,
            f"{what}: the optimizer was stepped with gradients of norm {data['norm']:.4g}; "
            "expected them clipped to max_grad_norm = 1.0",
        )
        expect(
            data["norm"] >= 0.5,
            f"{what}: the optimizer was stepped with gradients of norm {data['norm']:.3g}; "
            "expected 1.0: clip only after scaler.unscale_(optimizer)",
        )
    _expect_update_close(got, want, what)
    expect(
        data.get("cleared") is True,
        f"{what}: expected the gradients cleared after the step "
        "(optimizer.zero_grad()), or the next step adds to them",
    )


STEP_REFUSED = (
    "your amp_train_step uses effkit's default_train_step, the reference answer: write your own"
)
# effkit code that is the whole step (probes._REFERENCE): GradAccumulator's backward and step, with
# one micro-batch per window, are default_train_step's scale, backward, unscale_, clip, step, update
STEP_ANSWERS = ("default_train_step", "GradAccumulator.backward", "GradAccumulator.step")


def _refuse_reference(ctx, remote: _Remote | None = None) -> None:
    """By name in the source, or (``remote``) by behaviour: its code ran inside the learner's step."""
    source = "\n".join(src for _, src in ctx.session.cells)
    expect("default_train_step" not in source, STEP_REFUSED)
    ran = sorted(set(STEP_ANSWERS) & (remote.ran if remote is not None else set()))
    expect(
        not ran,
        f"your amp_train_step uses effkit's {', '.join(ran)}, the reference answer (it ran inside "
        "your step): write your own"
        + (
            " - GradAccumulator's backward and step are the whole step (scaled backward, unscale_, "
            "clip, scaler.step, update, zero_grad)"
            if any(n.startswith("GradAccumulator") for n in ran)
            else ""
        ),
    )


MADE_FROM_DATA = (
    " makes code from data at run time: the grader knows effkit's answers by their code objects, which a "
    "function built from data escapes (types.FunctionType on effkit's __code__, an exec'd copy), so it cannot "
    "tell your choose_policy, make_scaler and amp_train_step from the course's: write them as plain Python"
)


def _plain_cells(ctx) -> None:
    """Lesson 2's refusal (``makes_code_from_data``), after the watch: a clone of effkit's code object
    (``types.FunctionType(choose_precision.__code__.replace(co_name="cp"), vars(amp))``) is another code
    object, which the identity watch never sees (a review, 2026-12-07). Any cell: a function made in one
    cell is any other cell's global, so each check it could reach refuses it."""
    made = [
        f"cell {gid!r} ({', '.join(names)})"
        for gid, source in ctx.session.cells
        if (names := makes_code_from_data(source))
    ]
    expect(not made, "; ".join(made[:3]) + MADE_FROM_DATA)


POLICY_REFUSED = (
    "effkit's own answer ran when the grader called your choose_policy and make_scaler ({}): that "
    "is the reference answer, named or not; write your own rule and GradScaler call"
)


def cell_policy(ctx) -> None:
    remote = _Remote(ctx)
    r = remote.call("policy", "choose_policy / make_scaler")
    # effkit's choose_precision or AmpPolicy.make_scaler would judge correct below: the same watch
    # as the speed gate's (cell_not_the_reference) refuses them first
    expect(not remote.ran, POLICY_REFUSED.format(", ".join(sorted(remote.ran))))
    _plain_cells(ctx)
    # whether a CUDA GradScaler can be enabled here: the parent's own answer, not the worker's report
    _judge_policy(r.data | {"cuda": torch.cuda.is_available()}, ctx.ok)


def _first_step(ctx, seed: int, mode: str, scaler: str):
    """The learner's step once, on the grader's model and batch ``seed``, judged against the
    reference update: (remote, model key, the step's report, the weights after it)."""
    _refuse_reference(ctx)
    remote = _Remote(ctx)
    key, before = remote.setup(seed, mode, "policy" if mode == "bf16" else "spy", scaler)
    data, after = remote.step(key, seed, f"{mode} step")
    _refuse_reference(ctx, remote)
    _plain_cells(ctx)
    _judge_update(seed, seed, before, data, after, f"{mode} step")
    return remote, key, data, after


def cell_step(ctx) -> None:
    _, _, data, _ = _first_step(ctx, 0, "bf16", "spy")
    kinds = {dt for dt, on in data["seen"]}
    expect(
        any(on for _, on in data["seen"]) and "bfloat16" in kinds,
        f"expected the forward pass under policy.autocast() (matmuls in torch.bfloat16), but the model's "
        f"matmuls ran in {sorted(kinds)}",
    )
    ctx.ok("bf16: autocast forward, the batch's loss, a clipped update, gradients cleared")


def cell_scaler(ctx) -> None:
    remote, key, data, p1 = _first_step(ctx, 1, "fp16", "spy")
    scale = data["scale"]
    nan, p2 = remote.step(key, 1, "a step with NaN gradients", poison=True)
    changed = int((p2 != p1).sum())
    expect(
        changed == 0,
        f"a step with inf/NaN gradients changed {changed} parameter values; expected the update "
        "skipped (scaler.step(optimizer) skips it; optimizer.step() does not)",
    )
    expect(
        nan["scale"] is not None and scale is not None and nan["scale"] < scale,
        f"after a step with inf/NaN gradients expected the loss scale to back off from {scale} (scaler.update()), "
        f"got {nan['scale']}",
    )
    calls = nan["calls"]
    expect("scale" in calls, f"expected scaler.scale(loss).backward(); the scaler saw {calls}")
    expect(
        "unscale_" in calls and "step" in calls and calls.index("unscale_") < calls.index("step"),
        f"expected scaler.unscale_(optimizer) before clipping and scaler.step(optimizer); the scaler saw {calls}",
    )
    expect(
        calls[-1:] == ["update"],
        f"expected scaler.update() after scaler.step(); the scaler saw {calls}",
    )
    data, p3 = remote.step(key, 1, "the step after a skipped one")
    _judge_update(1, 1, p2, data, p3, "the step after a skipped one")
    ctx.ok(
        "fp16: scaled backward, unscale_ before clipping, a NaN step skipped and the scale backed off"
    )
    # hidden: fp32 on other seeds, 8 AdamW steps with the learner's own choice, their fp16 scaler
    for seed in (ctx.rng.randrange(100, 1000), ctx.rng.randrange(1000, 9000)):
        key, before = remote.setup(seed, "off", "off", "spy")
        data, after = remote.step(key, seed, f"an fp32 step (seed {seed})")
        _judge_update(seed, seed, before, data, after, f"an fp32 step (seed {seed})")
    key, first = remote.setup(5, "bf16", "learner_choice", "adamw")
    params = first
    for i in range(8):
        _, params = remote.step(key, 5, f"AdamW step {i + 1}")
    batch = probe.probe_batch(5)
    loss0, loss8 = (float(_model_at(p, 5)(**batch).loss.detach()) for p in (first, params))
    expect(
        math.isfinite(loss8) and loss8 < loss0,
        f"expected 8 AdamW steps on one batch to lower the loss "
        f"(recomputed by the grader): {loss0:.3f} -> {loss8:.3f}",
    )
    key, before = remote.setup(6, "fp16", "learner", "sgd")
    start = remote.scale
    nan, after = remote.step(key, 6, "your fp16 scaler on NaN gradients", poison=True)
    expect(
        bool((after == before).all())
        and None not in (start, nan["scale"])
        and nan["scale"] < start,
        "with your make_scaler's fp16 scaler, expected a NaN step skipped and the scale reduced",
    )
    ctx.ok(
        "hidden: fp32 steps on other seeds, 8 AdamW steps lower the loss, your fp16 scaler skips a NaN step"
    )


REFERENCE_RAN = (
    "effkit's own answer ran when the grader called your functions ({}): that is the reference "
    "answer, named or not; write your own choose_policy, make_scaler and amp_train_step "
    "to earn the performance points"
)


def cell_not_the_reference(ctx) -> None:
    """Speed gate only (no notebook cell, no points of its own): effkit's ``choose_precision``,
    ``AmpPolicy.make_scaler``, ``default_train_step`` or ``GradAccumulator.backward``/``.step``
    running inside the learner's functions is the reference answer, named or not
    (``getattr(module, "default_" + "train_step")``, ``importlib``, a partial, a closure); the
    source check sees only names. A clone of their code objects (``types.FunctionType`` on
    ``__code__.replace(...)``) is another code object, which the watch does not see: cells that make
    code from data are refused as text instead (:func:`_plain_cells`).
    The worker reports which of them started (their code objects, watched by the grader's probe
    while it calls learner code): a claim that can only deny the points. Unlike lesson 2's
    batches, a correct answer *behaves* exactly like the reference (the same update to the bit),
    so a verbatim copy of effkit's few lines is an independent answer here, not a refusal."""
    remote = _Remote(ctx)
    remote.call("policy", "choose_policy / make_scaler")
    seed = ctx.rng.randrange(100, 1000)
    key, _ = remote.setup(seed, "bf16", "learner_choice", "adamw")
    remote.step(key, seed, "a bf16 step with your policy and scaler")
    expect(not remote.ran, REFERENCE_RAN.format(", ".join(sorted(remote.ran))))
    _plain_cells(ctx)
    ctx.ok("your policy, scaler and step are your own (effkit's answers never ran inside them)")


CELL_CHECKS = {
    "test_policy": cell_policy,
    "test_step": cell_step,
    "test_scaler": cell_scaler,
    "test_quiz": quiz_check("lesson3", ("q1", "q2", "q3", "q4")),
    "not_the_reference": cell_not_the_reference,
}
ASSIGNMENT = Assignment(
    "lesson3",
    "amp_train_step",
    SETUP_SOURCE,
    CELL_CHECKS,
    names=("choose_policy", "make_scaler", "amp_train_step"),
    performance_cell="test_speed",
    runtime_module="grader.assignments.lesson3.runtime",
    specs=SPECS,
    targets=TARGETS,
    speed_gate=("test_policy", "test_step", "test_scaler", "not_the_reference"),
    reference_names=("default_train_step", "GradAccumulator"),
)
