"""Peer benchmark: the optimized BERT recipe against the Hugging Face ``Trainer`` at its best.

    python -m effkit.bench bert --against hf-trainer --profile cpu --data DIR --out DIR

The peer is ``transformers.Trainer`` with its own efficiency switches on (bf16, length grouping, dynamic
padding, SDPA, fused AdamW; ``torch_compile`` too with ``trainer_compile``), same model, weights, data and
evaluation. Its length-grouped sampler puts the longest batches first, so throughput is timed over whole
mega-batches, with optimized bursts interleaved.
"""

from __future__ import annotations

import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from effkit.abtest import ABResult, median_ci, median_ci_coverage, verdict
from effkit.measure import device_name, sync
from effkit.workloads import bert
from effkit.workloads.common import train_to_target


class _CountingCollator:
    """Wraps a collator to count the rows it batched (the samples the Trainer trained on)."""

    def __init__(self, inner):
        self.inner, self.rows = inner, 0

    def __call__(self, features):
        self.rows += len(features)
        return self.inner(features)


def _hf_parts(opt_trainer, device: torch.device, seed: int, out_dir: Path, compile_: bool = False):
    """(dataset, collator, make_trainer(model, steps, callbacks)) for the HF Trainer side."""
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    tok = opt_trainer.tokenizer
    max_len = 128
    enc = tok(opt_trainer.train_texts, truncation=True, max_length=max_len)["input_ids"]
    dataset = [
        {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": y}
        for ids, y in zip(enc, opt_trainer.train_labels, strict=True)
    ]  # tokenized once
    collator = _CountingCollator(DataCollatorWithPadding(tok, pad_to_multiple_of=8))
    s = opt_trainer.settings
    mode = opt_trainer.policy.mode

    def make(model, steps: int, callbacks=()):
        args = TrainingArguments(
            output_dir=str(out_dir),
            per_device_train_batch_size=s["batch_size"],
            learning_rate=s["lr"],
            weight_decay=0.01,
            lr_scheduler_type="linear",
            warmup_steps=max(1, round(s["warmup_ratio"] * opt_trainer.total_steps)),
            max_steps=steps,
            max_grad_norm=1.0,
            bf16=mode == "bf16",
            fp16=mode == "fp16",
            use_cpu=device.type == "cpu",
            train_sampling_strategy="group_by_length",
            optim="adamw_torch_fused",
            torch_compile=compile_,
            dataloader_num_workers=0,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            seed=seed,
        )
        return Trainer(
            model=model,
            args=args,
            train_dataset=dataset,
            data_collator=collator,
            callbacks=list(callbacks),
        )

    return dataset, collator, make


def _interleaving_clock(device, collator, segment: int, warm: int, opt_burst):
    """A callback that splits one ``Trainer.train()`` into timed segments of ``segment`` steps
    and runs (and times) one optimized burst between consecutive segments, Trainer paused."""
    from transformers import TrainerCallback

    class Interleave(TrainerCallback):
        def __init__(self):
            self.hf: list[float] = []  # samples/s of each Trainer segment
            self.opt: list[float] = []  # samples/s of each optimized burst
            self.mark = None

        def on_step_end(self, args, state, control, **kwargs):
            step = state.global_step
            if step < warm or (step - warm) % segment:
                return
            sync(device)
            now = time.perf_counter()
            if self.mark is not None:
                t0, r0 = self.mark
                self.hf.append((collator.rows - r0) / (now - t0))
            if step < args.max_steps:  # an optimized burst between two Trainer segments
                self.opt.append(opt_burst())
            sync(device)
            self.mark = (time.perf_counter(), collator.rows)

    return Interleave()


def run(
    profile: str,
    data: str | None,
    out: Path,
    *,
    device=None,
    seed: int = 0,
    pairs: int = 9,
    progress: bool = True,
    hooks: dict | None = None,
    full_run: bool = True,
    trainer_compile: bool = False,
) -> dict:
    """Interleaved throughput A/B and full runs; ``hooks`` change the optimized recipe only
    (e.g. ``{"compile": True}`` for an ablation row), ``trainer_compile`` turns on the Trainer's own
    ``torch_compile`` (the fair peer of a compiled recipe)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    name = device_name(device)
    data_dir = bert.prepare_data(profile, data)
    print(f"[effkit.bench] bert/{profile}: optimized vs HF Trainer on {name}", flush=True)
    hooks = dict(hooks or {})
    same = {
        k: v for k, v in hooks.items() if k == "model"
    }  # both sides start from the same weights
    opt = bert.build("optimized", profile, data_dir=data_dir, device=device, seed=seed, **hooks)
    hf_model = bert.build(
        "optimized", profile, data_dir=data_dir, device=device, seed=seed, **same
    ).model
    tmp = tempfile.TemporaryDirectory(prefix="hf-trainer-")  # Trainer's output_dir, gone on return
    _, collator, make = _hf_parts(opt, device, seed, Path(tmp.name), trainer_compile)
    # HF's length-grouped sampler sorts each mega-batch of ``mult`` batches longest first, so a
    # Trainer segment is timed over half a mega-batch and each optimized burst is compared with
    # the mean of the segments before and after it (a whole mega-batch, and drift cancels).
    n = len(opt.train_texts)
    mult = max(1, min(n // (4 * opt.settings["batch_size"]), 50))
    segment = max(1, mult // 2)
    # Warm-up: allocator and kernels; with compile, enough batches to meet the bucketed lengths
    # (the first H100 run warmed up 2 steps and its first timed burst recompiled: 41 samples/s).
    opt.train_steps(3 * segment if hooks.get("compile") else 2)
    k_opt = segment  # the same number of batches as a Trainer segment

    def opt_burst() -> float:
        sync(device)
        t = time.perf_counter()
        samples = opt.train_steps(k_opt).samples
        sync(device)
        return samples / (time.perf_counter() - t)

    # A compiled Trainer meets a new width in most of its first mega-batches (recompiles): the
    # same warm-up as a compiled recipe's, so no timed segment pays for compilation.
    warm = 3 * segment if trainer_compile else 2
    clock = _interleaving_clock(device, collator, segment, warm, opt_burst)
    make(hf_model, warm + segment * (pairs + 1), [clock]).train()
    # opt[0] ran before the first timed Trainer segment (a warm-up); opt[i] sits between Trainer
    # segments i-1 and i.
    hf_seg, opt_speeds = clock.hf, clock.opt[1:]
    hf_steady = [(a + b) / 2 for a, b in zip(hf_seg, hf_seg[1:], strict=False)]
    ratios = [o / h for o, h in zip(opt_speeds, hf_steady, strict=True)]
    lo, hi = median_ci(ratios)
    ab = ABResult(
        ratio=statistics.median(ratios),
        ci_low=lo,
        ci_high=hi,
        confidence=0.95,
        pairs=len(ratios),
        a_speeds=hf_steady,
        b_speeds=opt_speeds,
        ratios=ratios,
        seconds=0.0,
        coverage=median_ci_coverage(len(ratios)),
    )
    print(f"  throughput: {verdict(ab, 'HF Trainer', 'optimized')}", flush=True)
    opt = hf_model = None  # free them before the full runs
    result = {
        "benchmark": "bert optimized recipe vs Hugging Face Trainer (its own efficiency switches)",
        "profile": profile,
        "device": name,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "transformers": __import__("transformers").__version__,
        "optimized_hooks": hooks,
        "hf_trainer_torch_compile": trainer_compile,
        "speedup": ab.ratio,
        "speedup_ci": [ab.ci_low, ab.ci_high],
        "speedup_ci_coverage": ab.coverage,
        "speedup_spread": list(ab.spread),
        "ab_pairs": ab.pairs,
        "verdict": verdict(ab, "HF Trainer", "optimized").sentence,
        "samples_per_s": {
            "optimized": statistics.median(opt_speeds),
            "hf_trainer": statistics.median(hf_steady),
        },
        "samples_per_s_all": {"optimized": opt_speeds, "hf_trainer": hf_steady},
        "steps_per_burst": {"optimized": k_opt, "hf_trainer": segment},
        "hf_segment_samples_per_s": hf_seg,
    }
    out.mkdir(parents=True, exist_ok=True)
    if not full_run:  # an ablation row: throughput only
        (out / "result.json").write_text(json.dumps(result, indent=2))
        print(
            f"optimized / HF Trainer on {name}: {ab.ratio:.2f}x samples/s (interval "
            f"{ab.ci_low:.2f}-{ab.ci_high:.2f}, real coverage {100 * ab.coverage:.1f}%)"
        )
        return result
    # Full runs from the same initial weights: accuracy gate and end-to-end training time.
    full_opt = bert.build(
        "optimized", profile, data_dir=data_dir, device=device, seed=seed, **hooks
    )
    full_opt.stop_at_target = False
    opt_run = train_to_target(full_opt, progress=False, device_label=name)
    judge = bert.build("optimized", profile, data_dir=data_dir, device=device, seed=seed, **same)
    trainer = make(judge.model, judge.total_steps)
    sync(device)
    t0 = time.perf_counter()
    trainer.train()
    sync(device)
    hf_train_s = time.perf_counter() - t0
    hf_acc = judge.evaluate()
    result.update(
        {
            "hf_trainer_switches": {
                "precision": full_opt.policy.mode,
                "train_sampling_strategy": "group_by_length",
                "collator": "DataCollatorWithPadding(pad_to_multiple_of=8)",
                "attention": "sdpa",
                "optim": "adamw_torch_fused",
                "torch_compile": trainer_compile,
                "dataloader_num_workers": 0,
                "batch_size": full_opt.settings["batch_size"],
                "lr": full_opt.settings["lr"],
            },
            "optimized_config": full_opt.describe(),
            "full_run": {
                "steps": full_opt.total_steps,
                "optimized_train_seconds": opt_run.train_seconds,
                "hf_trainer_train_seconds": hf_train_s,
                "optimized_accuracy": opt_run.accuracy,
                "hf_trainer_accuracy": hf_acc,
                "accuracy_delta_pp": 100 * (opt_run.accuracy - hf_acc),
                "eval_split": full_opt.eval_split,
            },
        }
    )
    (out / "result.json").write_text(json.dumps(result, indent=2))
    f = result["full_run"]
    print(
        f"optimized / HF Trainer on {name}: {ab.ratio:.2f}x samples/s (interval "
        f"{ab.ci_low:.2f}-{ab.ci_high:.2f}, real coverage {100 * ab.coverage:.1f}%, {ab.pairs} "
        f"pairs); full run {f['hf_trainer_train_seconds']:.1f} s -> "
        f"{f['optimized_train_seconds']:.1f} s; accuracy {100 * hf_acc:.2f}% -> "
        f"{100 * opt_run.accuracy:.2f}% ({f['accuracy_delta_pp']:+.2f} pp)",
        flush=True,
    )
    return result
