"""Lesson 11: what the relay's record says about the ranks' gradient exchange.

``no_sync`` is judged by the content that crossed between ranks (one exchange per optimizer step,
each carrying the rank's accumulated gradient), which cannot be padded as a count could. Both
DDP's pre-divided and a hand-written post-divided scale are accepted.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from grader.assignments.lesson11.ddp_task import CONFIG, model, windows

ATOL, RTOL = 1e-9, 1e-7  # float64 gradients recomputed here agree with a rank's to ~1e-16


def syncs(log: list[dict], numel: int) -> tuple[list[list[int]], str]:
    """The float all-reduces of ``log`` grouped into exchanges of ``numel`` elements (their indices
    in ``log``), and a description of any that do not add up to whole gradients ("" if none)."""
    out, group, size, stray = [], [], 0, ""
    for i, call in enumerate(log):
        if call["op"] != "allreduce" or not any(
            d.startswith(("float", "bfloat")) for d in call["dtypes"]
        ):
            continue
        group.append(i)
        size += sum(call["numels"])
        if size == numel:
            out.append(group)
            group, size = [], 0
        elif size > numel:
            stray = (
                stray
                or f"collectives {group[0]}-{i} all-reduce {size:,} values, not whole gradients of {numel:,}"
            )
            group, size = [], 0
    if group:
        stray = (
            stray
            or f"collectives {group[0]}-{group[-1]} all-reduce {size:,} values, less than a gradient"
        )
    return out, stray


def side_traffic(log: list[dict], groups: list[list[int]]) -> tuple[int, list[str]]:
    """Float values that crossed between the ranks outside the gradient exchanges ``groups``, by any
    collective (broadcast, all-gather, all-reduce), and which kinds carried them: a gradient gathered per
    micro-batch beside one all-reduce per step would satisfy a count of all-reduces alone."""
    inside = {i for g in groups for i in g}
    values, kinds = 0, []
    for i, call in enumerate(log):
        floats = [
            n
            for d, n in zip(call["dtypes"], call["numels"], strict=True)
            if d.startswith(("float", "bfloat"))
        ]
        if i in inside or not floats:
            continue
        values += sum(floats)
        if call["op"] not in kinds:
            kinds.append(call["op"])
    return values, kinds


def sent(log: list[dict], group: list[int], rank: int) -> torch.Tensor:
    """What ``rank`` contributed to one exchange, as one float64 vector."""
    return torch.cat(
        [t.reshape(-1).to(torch.float64) for i in group for t in log[i]["tensors"][rank]]
    )


def brings(values: torch.Tensor, own: torch.Tensor, world: int) -> bool:
    """``values`` is ``own`` (in any order), or ``own / world``."""
    if values.numel() != own.numel() or not bool(torch.isfinite(values).all()):
        return False
    got = torch.sort(values).values
    for scale in (1.0, 1.0 / world):
        want = torch.sort(own * scale).values
        if float((got - want).abs().max()) <= ATOL + RTOL * float(want.abs().max()):
            return True
    return False


def reference(
    x, y, init_seed: int, served: list[list[int]], config: dict = CONFIG
) -> dict[str, torch.Tensor]:
    """One process, rank 0's initial weights, micro-batch ``k`` = every rank's ``k``-th batch of
    ``served`` together; the optimizer steps at the end of every window (``ddp_task.windows``), each
    micro-batch's loss divided by its window's length (what DDP's averaged, accumulated gradient
    equals when the window's mean loss is what is minimised)."""
    return reference_run(x, y, init_seed, served, config)[0]


def reference_run(x, y, init_seed: int, served: list[list[int]], config: dict = CONFIG):
    """``reference``'s weights, and for every optimizer step each rank's own accumulated gradient
    at that step's weights (its micro-batches' losses divided by the window's length), flattened in
    ``shapes()`` order: what an honest rank brings to that step's gradient all-reduce."""
    net = model(init_seed)
    params = list(net.parameters())
    opt = torch.optim.SGD(params, lr=config["lr"], momentum=config["momentum"])
    b, steps, k = config["batch_size"], [], 0
    for size in windows(config):
        own = [torch.zeros(sum(p.numel() for p in params), dtype=torch.float64) for _ in served]
        for _ in range(size):
            for r, rank in enumerate(served):  # each rank's share of this micro-batch, on its own
                i = rank[k * b : (k + 1) * b]
                grads = torch.autograd.grad(F.cross_entropy(net(x[i]), y[i]) / size, params)
                own[r] += torch.cat([g.reshape(-1) for g in grads])
            idx = [i for rank in served for i in rank[k * b : (k + 1) * b]]
            (F.cross_entropy(net(x[idx]), y[idx]) / size).backward()
            k += 1
        opt.step()
        opt.zero_grad()
        steps.append(own)
    return net.state_dict(), steps
