"""Planted bottlenecks for the doctor: a small text classifier whose step can be broken on purpose.

`planted_step` builds the classifier's :class:`~effkit.profiling.TrainStep` with any of the plants ``data``
(Python tokenising in the step), ``sync``, ``overhead`` (batch 1), ``padding``, ``optimizer`` (foreach off)
and, only where bf16 measurably pays here, ``precision``; the clean step runs in the precision that pays.
A *decoy* sets the field a plant is known by without its cost (one ``loss.item()``, a little padding, foreach
off on a step whose optimizer is a small share (the optimizer plant's rows, a small embedding table), batch 1 of
long rows): a judge that reads the flag and not the
time names it wrongly. `profile_named` profiles ``plant:<a>+<b>`` (``~<decoy>`` appended), ``cifar:<recipe>``
or ``bert:<recipe>`` on one thread.
"""

from __future__ import annotations

import functools
import random
import statistics
import string
import time

import torch
from torch import nn

from effkit import workloads
from effkit.amp import choose_precision, cpu_isa, cpu_native_bf16
from effkit.profiling import OVERHEAD_CALLS_BY_CLASS, TrainStep, profile_training

PLANTS = ("data", "sync", "overhead", "padding", "optimizer")  # plantable on every CPU
PRECISION = (
    "precision"  # plantable where bf16 makes the step faster and has its line (bf16_plantable)
)
BF16_PAYS = 1.15  # fp32 / bf16 step time at which fp32 is a bottleneck: the doctor's own bar (MATMUL_SHARE / 2)
PAIRS = (
    ("data", "sync"),
    ("data", "padding"),
    ("sync", "optimizer"),
    ("padding", "optimizer"),
    ("sync", "padding"),
    ("data", "optimizer"),
    ("overhead", "sync"),
)
DECOYS = ("sync", "padding", "optimizer", "overhead", "data")
# the data decoy tokenises documents this many times shorter than the data plant's: a data wait of about a quarter
# of the plant's, under the doctor's 25% line and over a line of a few percent (lesson10 README, calibration)
DATA_DECOY_SHORTER = 16
# the decoys' rows: long enough that the optimizer loop is a small share of the step (foreach off) and that batch 1
# still gives each matmul call many times the host's empty-call cost (lesson10 README, calibration)
LONG_ROWS = {"optimizer": 256, "overhead": 1024}
# the overhead plant's rows: short, so that its matmul calls are mostly the host's fixed cost on every CPU class.
# At LENGTH (32 tokens) they took 2.1-3.5 empty calls on AMD EPYCs but 3.8-4.1 on a 2-core AMX Xeon in fp32, where a
# host with half the call overhead would put them at 7.2, past the doctor's 7x line (CI there, 2026-12-05)
SHORT_ROWS = 8
# the optimizer plant's embedding rows (VOCAB are looked up, the rest only optimised): on the optimizer decoy's
# LONG_ROWS its per-tensor loop then takes a large share of the step, where the decoy's small table leaves it a few
# percent; the two otherwise alike (rows, batch, tensors, calls), so that only the optimizer's time tells them apart
TABLE = 1 << 16
# the padding decoy's rows lack at most this many tokens, and at most an eighth of the row: ~5% padding on rows of
# LENGTH, at most 12.5% on the overhead plant's SHORT_ROWS (3 of 8 tokens missing reached 37.5%, past the 30% rule)
LITTLE_PADDING = 3
VOCAB, LENGTH, DIM, BLOCKS, CLASSES = 512, 32, 32, 4, 4
WORDS = ["".join(random.Random(i).choices(string.ascii_lowercase, k=5)) for i in range(VOCAB - 2)]
TOKEN = {w: i + 2 for i, w in enumerate(WORDS)}  # 0: padding, 1: unknown


class TextNet(nn.Module):
    def __init__(self, nan_checks: bool = False, table: int = VOCAB):
        super().__init__()
        self.embed = nn.Embedding(table, DIM)  # rows past VOCAB are never looked up, only optimised
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.LayerNorm(DIM), nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM)
            )
            for _ in range(BLOCKS)
        )
        self.head = nn.Linear(DIM, CLASSES)
        self.nan_checks = nan_checks

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for block in self.blocks:
            h = h + block(h)
            if self.nan_checks and not bool(torch.isfinite(h).all()):  # a sync per block
                raise FloatingPointError("non-finite activations")
        m = mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1).clamp_min(1.0))


def _tokenize(text: str) -> list[int]:
    return [TOKEN.get(w.strip(".,;!?").lower(), 1) for w in text.split()]


def plants_here() -> tuple[str, ...]:
    """The plants this CPU can hold: PLANTS, and ``precision`` where bf16 units make this step faster."""
    return PLANTS + ((PRECISION,) if bf16_plantable() else ())


# fp32 / bf16 time of the clean step as bf16_pays_here last measured it (None: not measured, or no bf16 units)
MEASURED_BF16_SPEEDUP: float | None = None


@functools.lru_cache(maxsize=1)
def bf16_pays_here(rounds: int = 9, steps: int = 25) -> bool:
    """Whether bf16 autocast makes the clean step at least ``BF16_PAYS`` times faster on this CPU, measured
    (one thread, fp32 and bf16 interleaved, median of ``rounds``): bf16 units alone do not make fp32 a bottleneck."""
    if not cpu_native_bf16():
        return False
    times: dict[str, list[float]] = {"off": [], "bf16": []}
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = {mode: _bare_step(mode) for mode in times}
        for _ in range(rounds):
            for mode, run in runs.items():
                run(3)  # warm
                t0 = time.perf_counter()
                run(steps)
                times[mode].append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    global MEASURED_BF16_SPEEDUP
    MEASURED_BF16_SPEEDUP = statistics.median(times["off"]) / statistics.median(times["bf16"])
    return MEASURED_BF16_SPEEDUP >= BF16_PAYS


def bf16_line_known() -> bool:
    """Whether the doctor's overhead line is calibrated for bf16 on this CPU's class
    (``profiling.OVERHEAD_CALLS_BY_CLASS``; fp32 has its line on every class measured)."""
    return ("bfloat16", cpu_isa()) in OVERHEAD_CALLS_BY_CLASS


def bf16_plantable() -> bool:
    """bf16 pays here *and* its overhead line is calibrated for this CPU class: only then do the plants
    run in bf16 (and "fp32 on bf16 hardware" is a finding). Elsewhere they run in fp32, whose line holds
    on every class measured, so no host kind fails a correct diagnosis for want of a calibration: on a
    2-core AMX Xeon the overhead plant measured 15.6-22.8 floors in bf16 against the 7x line and a
    clean step's 27 (benchmarks/results/doctor-calibration.md)."""
    return bf16_pays_here() and bf16_line_known()


def _bare_step(mode: str):
    """``n`` optimizer steps of the clean classifier on one fixed batch, in precision ``mode``."""
    torch.manual_seed(0)
    model, policy = TextNet(), choose_precision("cpu", mode)
    opt = _adam(model, looped=False)  # the clean step's optimizer, whose precision this measures
    ids = torch.randint(2, VOCAB, (32, LENGTH))
    labels = torch.randint(0, CLASSES, (32,))

    def run(n: int) -> None:
        for _ in range(n):
            with policy.autocast():
                loss = nn.functional.cross_entropy(model(ids, ids.ne(0)), labels)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    run.optimizer = opt
    return run


def _adam(model: nn.Module, looped: bool) -> torch.optim.Adam:
    """The plants' optimizer: Adam, its per-tensor loop (``foreach=False``) only where ``looped``."""
    return torch.optim.Adam(model.parameters(), lr=1e-3, foreach=not looped)


def planted_step(
    plants: tuple[str, ...] | list[str] = (),
    seed: int = 0,
    decoys: tuple[str, ...] | list[str] = (),
) -> TrainStep:
    """The small text classifier's step with ``plants`` (names from :func:`plants_here`) broken on purpose,
    and ``decoys`` (from :data:`DECOYS`, none of them also planted): their tell-tale field without their cost."""
    here = plants_here()
    if set(decoys) - set(DECOYS) or set(decoys) & set(plants):
        raise ValueError(
            f"decoys {sorted(decoys)}: choose from {DECOYS}, none of them also planted"
        )
    # together, batch 1 would make the optimizer a big share again
    if len([d for d in decoys if d in LONG_ROWS]) > 1:
        raise ValueError(f"at most one of the decoys {sorted(LONG_ROWS)} per step")
    long = max([LONG_ROWS[d] for d in decoys if d in LONG_ROWS], default=LENGTH)
    # the data plant tokenises rows of LENGTH tokens, long rows would cure the overhead plant's batch 1, and the
    # optimizer plant has the optimizer decoy's rows already
    if long > LENGTH and {"data", "overhead", "optimizer"} & set(plants):
        raise ValueError("no long-row decoy beside the data, the overhead or the optimizer plant")
    # the data decoy tokenises rows of LENGTH, as the data plant does
    if "data" in decoys and (long > LENGTH or {"overhead", "optimizer"} & set(plants)):
        raise ValueError(
            "no data decoy beside a long-row decoy, the overhead or the optimizer plant"
        )
    # the optimizer plant on its decoy's rows, its loop made costly by a big embedding table (TABLE): no field but
    # the optimizer's time tells them apart (beside the data or the overhead plant, which fix the rows, as before)
    big_loop = "optimizer" in plants and not {"data", "overhead"} & set(plants)
    long = SHORT_ROWS if "overhead" in plants else LONG_ROWS["optimizer"] if big_loop else long
    unknown = set(plants) - set(here)
    if PRECISION in unknown:
        raise ValueError(
            "the precision plant needs a CPU whose bf16 units make this step faster (measured: "
            "bf16_pays_here) and whose bf16 has a calibrated overhead line (bf16_plantable): on "
            "this one fp32 is no bottleneck, or bf16 is not calibrated, so nothing is planted"
        )
    if unknown:
        raise ValueError(f"unknown plant(s) {sorted(unknown)}; choose from {here}")
    # the clean step's precision is the one that pays here (bf16 only where measured faster), the plant's fp32
    policy = choose_precision("cpu", "off" if PRECISION in plants else cpu_mode())
    torch.manual_seed(seed)
    rng = random.Random(seed)
    batch = 1 if "overhead" in plants or "overhead" in decoys else 32
    n = 64 * batch
    little = min(LITTLE_PADDING, long // 8)
    low = 4 if "padding" in plants else long - little if "padding" in decoys else long
    lengths = [rng.randint(low, long) for _ in range(n)]
    labels = torch.randint(0, CLASSES, (n,))
    ids = torch.zeros(n, long, dtype=torch.long)
    for i, n_tok in enumerate(lengths):
        ids[i, :n_tok] = torch.randint(2, VOCAB, (n_tok,))
    mask = ids.ne(0)
    words = 32 * LENGTH // (1 if "data" in plants else DATA_DECOY_SHORTER)
    texts = (
        [" ".join(rng.choice(WORDS).upper() + "," for _ in range(words)) for _ in range(n)]
        if "data" in plants or "data" in decoys
        else []
    )
    state = {"i": 0}

    def next_batch():
        lo = state["i"] % (n // batch) * batch
        state["i"] += 1
        if not texts:
            return ids[lo : lo + batch], mask[lo : lo + batch], labels[lo : lo + batch]
        rows = []
        for text, n_tok in zip(texts[lo : lo + batch], lengths[lo : lo + batch], strict=True):
            tokens = _tokenize(text)[:n_tok]  # the whole document tokenised, then truncated
            rows.append(torch.tensor(tokens + [0] * (LENGTH - len(tokens))))
        x = torch.stack(rows)
        return x, x.ne(0), labels[lo : lo + batch]

    model = TextNet(nan_checks="sync" in plants, table=TABLE if big_loop else VOCAB)
    loss_fn = nn.CrossEntropyLoss()
    looped = "optimizer" in plants or "optimizer" in decoys
    opt = _adam(model, looped)
    history = []

    def after(loss):
        if "sync" in plants or "sync" in decoys:  # the decoy: this one read per step, no NaN checks
            history.append(loss.item())

    def padding(b):
        return 1.0 - float(b[1].float().mean())

    def loss(b):
        with policy.autocast():
            return loss_fn(model(b[0], b[1]), b[2])

    return TrainStep(
        next_batch=next_batch,
        loss=loss,
        optimizer=opt,
        model=model,
        batch_size=batch,
        after=after,
        padding=padding,
        name="plant:" + ("+".join(plants) or "clean") + "".join("~" + d for d in decoys),
    )


def cifar_step(recipe: str, seed: int = 0) -> TrainStep:
    """A course CIFAR recipe (smoke profile) as a TrainStep: its batches, loss, optimizer, schedule."""
    t = workloads.get("cifar").build(recipe, "smoke", device="cpu", seed=seed)
    if hasattr(t, "_init_whitening"):
        t._init_whitening()

    def loss(b):
        x = b[0].contiguous(memory_format=t.memory_format)
        with t.policy.autocast():
            return t.loss_fn(t.forward(x), b[1])

    return TrainStep(
        next_batch=t._next_batch,
        loss=loss,
        optimizer=t.optimizer,
        model=t.model,
        batch_size=t.cfg.batch_size,
        scheduler=t.scheduler,
        name=f"cifar:{recipe}",
    )


def bert_step(recipe: str, seed: int = 0) -> TrainStep:
    """A course BERT recipe (smoke profile) as a TrainStep: its loader, forward, optimizer, schedule and
    the padded share of each batch (the naive recipe pads every row to ``max_length``)."""
    t = workloads.get("bert").build(
        recipe,
        "smoke",
        device="cpu",
        seed=seed,
        **({"precision": cpu_mode()} if recipe == "optimized" else {}),
    )

    def loss(b):
        with t.policy.autocast():
            return t.model(**b).loss

    def padding(b) -> float:
        mask = b["attention_mask"]
        return 1.0 - float(mask.sum()) / mask.numel()

    return TrainStep(
        next_batch=lambda: next(t._batches),
        loss=loss,
        optimizer=t.optimizer,
        model=t.model,
        batch_size=t.settings["batch_size"],
        scheduler=t.scheduler,
        padding=padding,
        name=f"bert:{recipe}",
    )


def cpu_mode() -> str:
    """The precision the doctor profiles in on this CPU: bf16 where it measured faster and has its line (bf16_plantable),
    else fp32 (bf16 that does not pay can still shorten matmul calls enough to read as overhead-bound)."""
    return "bf16" if bf16_plantable() else "off"


def profile_named(name: str, seed: int = 0, **kw) -> dict:
    """Profile ``cifar:<recipe>``, ``bert:<recipe>`` or ``plant:<a>+<b>`` (``plant:clean``) on one thread.
    "fp32 on bf16 hardware" is a finding only where bf16 pays here (``bf16_hardware``)."""
    kw.setdefault("bf16_hardware", bf16_plantable())
    kind, _, what = name.partition(":")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if kind == "cifar":
            return profile_training(cifar_step(what, seed), **kw)
        if kind == "bert":
            return profile_training(bert_step(what, seed), **kw)
        if kind == "plant":
            what, *decoys = what.split("~")
            plants = tuple(p for p in what.split("+") if p and p != "clean")
            return profile_training(planted_step(plants, seed, tuple(decoys)), **kw)
    finally:
        torch.set_num_threads(threads)
    raise ValueError(
        f"unknown workload {name!r}: use cifar:naive, cifar:optimized, bert:naive, bert:optimized "
        "or plant:<a>+<b>~<decoy>"
    )
