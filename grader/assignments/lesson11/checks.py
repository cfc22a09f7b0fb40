"""Lesson 11 - a data-parallel training function, run on 2 ranks and judged by the parent.

Each rank is a sandboxed worker whose only process group is the grader's relay, so this process
sees every collective's content and recomputes the reference from what the ranks claim to have
served; part (b) judges a per-rank memory budget. Every rank's claim is untrusted.
"""

from __future__ import annotations

import threading

from grader.assignments.lesson11 import ddp_task as task
from grader.assignments.lesson11 import exchange
from grader.assignments.lesson11 import memory_task as mem
from grader.kit.assignment import Assignment
from grader.kit.checks import (
    CallResult,
    ChannelError,
    CheckFailed,
    Context,
    ProbeSession,
    Relay,
    expect,
    quiz_check,
    stub_reason,
)

CALL_SECONDS = 60


def _run(ctx: Context) -> dict:
    """One training run per grading, shared by the three cells (cached on the probe session): rank 0
    in the grading's worker, rank 1 in a sandbox of its own, every collective performed by this
    process's relay, whose record is the evidence."""
    cached = getattr(ctx.session, "lesson11_run", None)
    if cached is not None:
        return cached
    data_seed, init_seed = ctx.rng.randrange(1 << 30), ctx.rng.randrange(1 << 30)
    args = {"data_seed": data_seed, "init_seed": init_seed, "config": dict(task.CONFIG)}
    run = {
        "data_seed": data_seed,
        "init_seed": init_seed,
        "ok": True,
        "failure": "",
        "ranks": [],
        "weights": [],
        "log": None,
    }
    base, sessions, relay = ctx.session, [], Relay(task.WORLD, wait_s=task.RANK_SECONDS)
    try:
        if getattr(base, "box", True) is None:
            base.start()  # rank 0's cells load before the clock of the ranks' call starts
        if hasattr(base, "call_ranks"):  # the tests' in-process harness: it forks the ranks itself
            results = base.call_ranks(
                "train", task.RANK_SECONDS + 5, task.WORLD, relay=relay, **args
            )
        else:
            sessions = [_rank_session(base)]
            sessions[0].start()
            results = _call_ranks(
                [base, *sessions], "train", task.RANK_SECONDS + 5, relay=relay, **args
            )
        run["log"] = relay.log
        for rank, r in enumerate(results):
            late = "did not return within" in r.failure
            run["ranks"].append(
                r.data
                if r.ok
                else {
                    "error": f"rank {rank} did not finish within "
                    f"{task.RANK_SECONDS:.0f} s and was killed (a collective its peer never joined?)"
                    if late
                    else f"rank {rank}: {r.failure}"
                }
            )
            run["weights"] += r.blobs[:1] if r.ok else [b""]
        if any(
            len(r.blobs) != 1 or not isinstance(c, dict)
            for r, c in zip(results, run["ranks"], strict=True)
            if r.ok
        ):
            run.update(ok=False, failure="the worker's answer had the wrong shape")
        elif relay.failure:
            run.update(
                ok=False, failure=f"a rank broke the grader's process group ({relay.failure})"
            )
    except ChannelError as err:
        run.update(ok=False, failure=f"your solution cells did not load ({err})")
    finally:
        _close(base, sessions)
    ctx.session.lesson11_run = run
    return run


def _call_ranks(
    sessions: list, probe: str, timeout_s: float, relay: Relay | None = None, **args
) -> list[CallResult]:
    """``probe`` in every rank's worker at once (rank r in ``sessions[r]``), each on its own clock;
    ``relay`` answers their collectives."""
    results: list = [None] * len(sessions)

    def call(rank: int) -> None:
        try:
            serve = relay.serve_for(rank) if relay is not None else None
            results[rank] = sessions[rank].call(probe, timeout_s, serve, rank=rank, **args)
        except (
            OSError,
            ValueError,
        ) as err:  # a pipe the worker broke: its failure, not the grader's
            results[rank] = CallResult(
                False, failure=f"rank {rank}'s worker broke its channel ({err})"
            )
        finally:
            if relay is not None:
                relay.finish(
                    rank
                )  # a peer waiting in a collective this rank never joins stops waiting

    threads = [threading.Thread(target=call, args=(r,)) for r in range(len(sessions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _rank_session(base: ProbeSession, join: ProbeSession | None = None) -> ProbeSession:
    """A rank's worker: the learner's cells as ``base`` holds them, the loopback up (gloo), ``join``
    sharing another rank's network namespace."""
    return ProbeSession(
        base.probes,
        base.setup,
        base.cells,
        base.names,
        base.limits,
        loopback=True,
        join=join,
        cpu_only=base.cpu_only,
    )


def _close(base, sessions: list) -> None:
    """Close the ranks' own sessions, keeping what they noted on the grading's session."""
    for s in sessions:
        base._note(s.evidence)
        base.unavailable += [u for u in s.unavailable if u not in base.unavailable]
        s.close()


def _served(run: dict) -> list[list[int]]:
    """Each rank's served indices, validated as plain ints in range (a claim refused otherwise)."""
    errors = [str(c.get("error") if isinstance(c, dict) else "no claims") for c in run["ranks"]]
    errors = [e for e in errors if e and e != "None"]
    if errors:  # every rank's, so a rank's timeout is seen next to the peer that never joined
        raise CheckFailed(stub_reason(errors[0]) or "; ".join(e[:300] for e in errors))
    out = []
    for rank, claims in enumerate(run["ranks"]):
        served = claims.get("served")
        expect(
            isinstance(served, list) and all(type(i) is int and 0 <= i < task.N for i in served),
            f"rank {rank}'s record of served samples is not a list of indices in [0, {task.N})",
        )
        out.append(served)
    return out


def _exchanges(run: dict) -> tuple[list[list[int]], str]:
    """The ranks' gradient all-reduces as this process performed them (never a rank's claim)."""
    expect(
        run.get("log") is not None,
        "the grader holds no record of the ranks' collectives: their communication is unmeasured",
    )
    return exchange.syncs(run["log"], task.param_bytes() // 8)


def _traffic(run: dict) -> str:
    found, _ = _exchanges(run)
    return (
        f"the ranks all-reduced {len(found)} whole gradients of {task.param_bytes() / 1e3:.0f} KB through the "
        f"grader's process group ({len(run['log'])} collectives in all)"
    )


def _reference(run: dict):
    """The parent's one-process run over the claimed global batches (weights, each step's own gradients)."""
    if "reference" not in run:
        x, y = task.data(run["data_seed"])
        run["reference"] = exchange.reference_run(x, y, run["init_seed"], _served(run))
    return run["reference"]


def check_weights(ctx: Context) -> None:
    run = _run(ctx)
    expect(run["ok"], stub_reason(run["failure"]) or f"training failed: {run['failure']}")
    served = _served(run)
    want = task.per_rank_samples()
    for rank, s in enumerate(served):
        expect(
            len(s) == want,
            f"rank {rank} served {len(s)} samples in {task.CONFIG['epochs']} epochs; its share is {want} "
            f"({task.N} samples / {task.WORLD} ranks per epoch): does each rank read only its shard "
            "(DistributedSampler), and did you train every epoch?",
        )
    ctx.ok(f"each rank served its share: {want} samples over {task.CONFIG['epochs']} epochs")
    steps = task.optimizer_steps()
    expect(
        len(_exchanges(run)[0]) >= steps,
        f"{_traffic(run)}, for {steps} optimizer steps (windows of {', '.join(map(str, task.windows()))} "
        "micro-batches: every epoch's last, shorter window steps too): every window's gradients must be "
        "averaged across the ranks; wrap the model in DistributedDataParallel and let its backward "
        "synchronise them",
    )
    ctx.ok(_traffic(run))
    ref = _reference(run)[0]
    start = task.model(run["init_seed"]).state_dict()
    moved = max(float((ref[k] - start[k]).abs().max()) for k in ref)
    for rank, raw in enumerate(run["weights"]):
        got = task.from_bytes(raw)
        expect(
            got is not None,
            f"rank {rank} returned {len(raw)} bytes of weights, not the model's parameters",
        )
        err = max(float((got[k] - ref[k]).abs().max()) for k in ref)
        expect(
            err == err and err <= task.TOL,
            f"rank {rank}'s final weights differ from one process trained on the same global batches by "
            f"{err:.2e} (tolerance {task.TOL:g}; training moved them by {moved:.2f}): check the loss scaling "
            "under accumulation (each window's mean loss), that every epoch's last, shorter window steps too, "
            "that every rank starts from the same weights, and the optimizer recipe",
        )
    ctx.ok(
        f"every rank's weights equal one process over the same global batches (max difference <= {task.TOL:g})"
    )


def check_sampler(ctx: Context) -> None:
    run = _run(ctx)
    expect(run["ok"], stub_reason(run["failure"]) or f"training failed: {run['failure']}")
    served = _served(run)
    per_epoch = task.N // task.WORLD
    epochs = task.CONFIG["epochs"]
    for rank, s in enumerate(served):
        expect(
            len(s) == epochs * per_epoch,
            f"rank {rank} served {len(s)} samples; {epochs} epochs of its shard are {epochs * per_epoch}",
        )
    for e in range(epochs):
        chunk = [s[e * per_epoch : (e + 1) * per_epoch] for s in served]
        seen = sorted(i for c in chunk for i in c)
        twice = sorted({i for i in seen if seen.count(i) > 1})
        expect(
            not twice,
            f"epoch {e}: samples {twice[:5]} were served more than once across the ranks "
            "(each rank must read a disjoint shard: DistributedSampler)",
        )
        expect(
            seen == list(range(task.N)),
            f"epoch {e}: {task.N - len(set(seen))} samples were never served",
        )
    ctx.ok(
        f"every epoch, each of the {task.N} samples was served exactly once across the {task.WORLD} ranks"
    )
    for rank, s in enumerate(served):
        for e in range(1, epochs):
            expect(
                s[e * per_epoch : (e + 1) * per_epoch] != s[(e - 1) * per_epoch : e * per_epoch],
                f"rank {rank} served epoch {e} in the same order as epoch {e - 1}: call "
                "sampler.set_epoch(epoch) at the start of each epoch",
            )
    ctx.ok("each epoch was reshuffled (set_epoch)")


def check_no_sync(ctx: Context) -> None:
    check_weights(
        Context(ctx.session, ctx.rng)
    )  # the exchange only means something for a correct run
    run, steps, acc = _run(ctx), task.optimizer_steps(), task.CONFIG["accumulation"]
    found, stray = _exchanges(run)
    expect(not stray, f"{stray}: besides the gradients, nothing else needs all-reducing here")
    expect(
        len(found) == steps,
        f"{_traffic(run)}, for {steps} optimizer steps of up to {acc} micro-batches: one all-reduce per "
        "optimizer step is enough; skip the others with `with model.no_sync():` on every micro-batch but "
        "each window's last (an epoch's last window may be shorter)",
    )
    # DDP broadcasts rank 0's weights once when it wraps the model; nothing else needs to cross
    start = task.model(run["init_seed"])
    allowed = sum(t.numel() for t in [*start.parameters(), *start.buffers()])
    side, kinds = exchange.side_traffic(run["log"], found)
    expect(
        side <= allowed,
        f"{side:,} float values crossed between the ranks outside the {len(found)} gradient all-reduces "
        f"(by {', '.join(kinds)}); only DDP's one broadcast of the initial weights ({allowed:,}) is "
        "needed: under no_sync, no gradient may travel by another collective",
    )
    own = _reference(run)[1]
    for j, group in enumerate(found):
        for rank in range(task.WORLD):
            expect(
                exchange.brings(exchange.sent(run["log"], group, rank), own[j][rank], task.WORLD),
                f"gradient all-reduce {j + 1} of {steps}: what rank {rank} sent is not its own gradient "
                f"accumulated over optimizer step {j + 1}'s {task.windows()[j]} micro-batches (the grader recomputed it from "
                f"the samples rank {rank} served): the one all-reduce per step must carry what the "
                "micro-batches under no_sync accumulated",
            )
    ctx.ok(
        f"one gradient all-reduce per optimizer step, each carrying every rank's accumulated gradient: "
        f"{_traffic(run)} for {steps} steps"
    )


def _sharded_run(ctx: Context) -> dict:
    """Part (b)'s one run per grading: each rank a sandboxed worker of its own (its own memory cgroup,
    one shared network namespace), started by this process like ``torchrun`` starts processes; the
    ranks' fingerprints, and each rank's peak as the kernel charged it."""
    cached = getattr(ctx.session, "lesson11_sharded", None)
    if cached is not None:
        return cached
    seeds = {name: ctx.rng.randrange(1 << 30) for name in ("data_seed", "init_seed", "form_seed")}
    seeds["arch"] = mem.draw(
        ctx.rng
    )  # a model the lesson never showed: uneven blocks, nested stages
    port, base, sessions = 20_000 + ctx.rng.randrange(20_000), ctx.session, []
    run = {**seeds, "ok": False, "failure": "", "ranks": [], "growth": []}
    try:
        for rank in range(mem.WORLD):
            sessions.append(_rank_session(base, join=sessions[0] if rank else None))
            sessions[-1].start()

        results = _call_ranks(sessions, "train_rank", CALL_SECONDS, port=port, **seeds)
        run["growth"] = [s.memory_growth() for s in sessions]
        failed = [r for r in results if not r.ok]
        run.update(
            ok=not failed,
            failure=failed[0].failure if failed else "",
            ranks=[r.data if r.ok else {} for r in results],
        )
    except ChannelError as err:
        run["failure"] = f"your solution cells did not load ({err})"
    finally:
        _close(base, sessions)
    ctx.session.lesson11_sharded = run
    return run


def check_memory_budget(ctx: Context) -> None:
    run = _sharded_run(ctx)
    expect(run["ok"], stub_reason(run["failure"]) or f"training failed: {run['failure']}")
    errors = [str(c.get("error")) for c in run["ranks"] if isinstance(c, dict) and c.get("error")]
    expect(
        not errors and all(isinstance(c, dict) for c in run["ranks"]),
        (stub_reason(errors[0]) or "; ".join(errors)) if errors else "a rank sent no claims",
    )
    arch = run["arch"]
    want = mem.fingerprint(
        mem.reference(run["init_seed"], run["data_seed"], arch), run["form_seed"], arch
    )
    worst = 0.0
    for rank, claims in enumerate(run["ranks"]):
        got = claims.get("forms")
        expect(
            isinstance(got, list) and len(got) == len(want) and all(type(v) is float for v in got),
            f"rank {rank}'s weights could not be read back",
        )
        err = max(abs(a - b) for a, b in zip(got, want, strict=True))
        expect(
            err == err and err <= mem.TOL,
            f"rank {rank}'s final weights differ from one process's Adam over the global batch (both ranks' "
            f"micro-batches of each step) by {err:.1e} in RMS (tolerance {mem.TOL:g}): average the gradients "
            "across the ranks, one optimizer step per micro-batch, Adam with config['lr']",
        )
        worst = max(worst, err)
    ctx.ok(
        f"every rank's weights equal one process's Adam over the global batch ({worst:.1e} RMS apart at "
        f"most; tolerance {mem.TOL:g})"
    )
    expect(
        len(run["growth"]) == mem.WORLD and None not in run["growth"],
        "the grader could not read every rank's memory (neither a memory cgroup nor the worker's "
        "/proc status): the budget is unmeasured, so it cannot be awarded here",
    )
    worst = max(range(mem.WORLD), key=lambda r: run["growth"][r])
    per = run["growth"][worst] / mem.parameters(arch)
    figure = (
        f"peak {' and '.join(f'{g / 2**20:.0f}' for g in run['growth'])} MiB on ranks "
        f"{' and '.join(map(str, range(mem.WORLD)))}: rank {worst}'s = {per:.1f} bytes per parameter and rank "
        f"of this grading's {mem.parameters(arch) / 1e6:.1f}M-parameter model (the kernel's count; budget "
        f"{mem.BUDGET:g})"
    )
    expect(per <= mem.BUDGET, f"{figure}. {_arithmetic(arch)}")
    ctx.ok(figure)


def _arithmetic(arch: dict) -> str:
    """What each recipe holds per parameter on this grading's model: the feedback of a peak over budget."""
    block = mem.largest_block(arch)
    return (
        "Per parameter and rank (fp32 Adam, 2 ranks): DDP 4 + 4 + its bucket copy 4 + Adam's 8 = 20; any "
        "ZeRO-1 (ZeroRedundancyOptimizer, even with gradient_as_bucket_view) keeps the whole parameters and "
        "gradients on every rank, 4 + 4 + its share of Adam's state >= 4 = 12, and it hands out whole tensors, "
        "so its share is at least half. Only sharding parameters and gradients too fits: FSDP2 holds 8 plus "
        "the unit it has gathered (parameters and their gradients in full). A unit is what you call "
        "fully_shard on; the root's unit holds every parameter no inner call claimed. This model is "
        f"nested (two stages of {len(arch['hidden'])} uneven blocks, print(model)): its largest block is "
        f"{block:.0%} of the parameters (+{8 * block:.1f} gathered), each stage over half (+4 or more)"
    )


SETUP_SOURCE = """import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler"""


CELL_CHECKS = {
    "test_weights": check_weights,
    "test_sampler": check_sampler,
    "test_no_sync": check_no_sync,
    "test_memory_budget": check_memory_budget,
    "test_quiz": quiz_check("lesson11", ("q1", "q2", "q3", "q4", "q5")),
}
NAMES = ("train_ddp", "train_sharded")

ASSIGNMENT = Assignment(
    "lesson11", "train_ddp", SETUP_SOURCE, CELL_CHECKS, names=NAMES, loopback=True, cpu_only=True
)
