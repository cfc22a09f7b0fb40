"""Where one optimized BERT training step spends its time: phases (forward, backward, clip, optimizer) and
the forward+backward's operators grouped by kind (matmuls, dropout's random numbers, dtype casts, ...).

Usage: ``python benchmarks/bert_step_profile.py --data ../shared/data/sst2 [--profile cpu] [--compile]
[--steps 20] [--out FILE.json]``

Why: the peer benchmark (``python -m effkit.bench bert --against hf-trainer``) says how fast the optimized
recipe is against the Hugging Face Trainer, not why. A step that is mostly matmuls leaves little for a recipe
to win over a peer running the same matmuls; a step that is mostly elementwise work, casts and random numbers
leaves room for fusion (``torch.compile``). The profiler's times are per operator on the host (``CPU total`` of
each phase, ``self CPU`` of each operator), summed over ``--steps`` real, bucketed batches after a warm-up;
on a GPU they are launch times, not kernel times, so this script refuses CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from effkit.measure import device_name  # noqa: E402
from effkit.workloads.bert import recipes  # noqa: E402

PHASES = ("forward", "backward", "clip", "optimizer")
# operator name -> kind; the first matching prefix wins, anything else is "other elementwise and glue"
KINDS = (
    (
        "matmuls",
        ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_weight_int8pack_mm"),
    ),
    ("dropout's random numbers", ("aten::bernoulli_", "aten::native_dropout")),
    ("dtype casts and copies", ("aten::copy_", "aten::_to_copy")),
    ("compiled (fused) kernels", ("## Call CompiledFxGraph",)),
    ("the optimizer (fused AdamW)", ("aten::_fused_adamw_",)),
    ("clipping's norms", ("aten::linalg_vector_norm", "aten::_foreach_norm")),
    ("softmax, layer norm, GELU", ("aten::_softmax", "aten::native_layer_norm", "aten::gelu")),
)


def profiled_step(model, batch, optimizer, policy, scaler, max_grad_norm) -> float:
    """The recipe's default step with each phase named for the profiler (same calls, same order)."""
    with record_function("forward"), policy.autocast():
        loss = model(**batch).loss
    with record_function("backward"):
        scaler.scale(loss).backward()
    with record_function("clip"):
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    with record_function("optimizer"):
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def kind_of(name: str) -> str:
    for kind, prefixes in KINDS:
        if name.startswith(prefixes):
            return kind
    return "other elementwise and glue"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="folder with SST-2's train/dev/test files")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--compile", action="store_true", help="torch.compile the training forward")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument(
        "--warmup", type=int, default=30, help="steps before profiling (compilation, caches)"
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if torch.cuda.is_available():
        raise SystemExit(
            "CPU only: on a GPU the host-side profile shows launches, not kernel times"
        )
    hooks = {"train_step": profiled_step, "max_train_samples": 64 * (args.warmup + args.steps + 5)}
    if args.compile:
        hooks["compile"] = True
    trainer = recipes.build("optimized", args.profile, data_dir=args.data, device="cpu", **hooks)
    start = time.perf_counter()
    trainer.train_steps(args.warmup)
    print(f"warm-up: {args.warmup} steps in {time.perf_counter() - start:.1f} s", flush=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        trainer.train_steps(args.steps)
        wall = time.perf_counter() - start
    events = prof.key_averages()
    per_step = lambda us: us / 1000 / args.steps  # noqa: E731  (profiler microseconds -> ms per step)
    phases = {e.key: per_step(e.cpu_time_total) for e in events if e.key in PHASES}
    kinds: dict[str, float] = {}
    for e in events:  # self times of operators, so nothing is counted twice
        if e.key.startswith(("aten::", "## Call CompiledFxGraph")):
            kinds[kind_of(e.key)] = kinds.get(kind_of(e.key), 0.0) + per_step(e.self_cpu_time_total)
    step_ms = 1000 * wall / args.steps  # under the profiler, which adds a little per operator
    result = {
        "device": device_name("cpu"),
        "torch": torch.__version__,
        "settings": {
            k: trainer.settings.get(k) for k in ("model", "batch_size", "precision", "compile")
        },
        "precision": trainer.policy.mode,
        "steps": args.steps,
        "step_ms_profiled": step_ms,
        "epoch_mean_padded_length": trainer.settings.get("mean_padded_length"),
        "load_average": os.getloadavg(),
        "phases_ms_per_step": phases,
        "operator_kinds_ms_per_step": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        "command": "python " + " ".join(sys.argv),
    }
    print(
        f"{result['device']}, {trainer.policy.mode}, compile={args.compile}: {step_ms:.0f} ms a step "
        f"under the profiler ({args.steps} steps)"
    )
    for name, ms in phases.items():
        print(f"  phase {name:<10} {ms:7.1f} ms  {ms / step_ms:5.1%}")
    total = sum(kinds.values())
    for name, ms in result["operator_kinds_ms_per_step"].items():
        print(f"  {name:<28} {ms:7.1f} ms  {ms / total:5.1%} of operator time")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
