"""What every lesson shares: the profile switch, A/B with a verdict and its plot, guesses, peaks.

**What it does.** `profile()` picks the lesson's experiment size (``EFFKIT_PROFILE`` =
``smoke`` | ``cpu`` | ``gpu``; unset: ``gpu`` with CUDA, else ``cpu``). `ab()` runs
`effkit.abtest.compare` with a progress bar and prints `effkit.abtest.verdict`'s sentence, so a
lesson never words a conclusion its interval does not support; `inference_burst()` is a burst of
forward passes for it. `plot_ab()` draws one bar per A/B (never medians from different A/Bs side
by side). `check_guess()` closes a "predict, then measure" cell, `check_answer()` an "in your own
words" cell (`written_answer()` against the key points its grader manifest declares).
`peak_flops_for()` names the peak an MFU is divided by, precision included.
``python -m effkit.lesson build [--check]`` converts the jupytext sources ``notebooks/*.py`` into
the committed notebooks.

**When to use it.** In every lesson notebook: the lessons stay short and agree with each other.

**Expected gain.** Conclusions computed from measurements, the same wording in every lesson.

**Pitfalls.** Order-statistic intervals need >= 6 pairs to cover the median ~95% of the time
(3 pairs: 75%): `ab()` refuses fewer than 6 unless asked, and always states the real coverage.
With 6 pairs the interval is the [min, max] of the ratios, often wide on a busy machine: `ab()`
keeps adding pairs (up to ``max_pairs``, twice ``pairs`` by default, none in smoke) until the interval's
half-width is within ``rel_ci`` of the ratio, and when it is still wider than a factor of
``WIDE`` it says "no evidence either way" rather than "no clear difference". In the ``smoke``
profile every verdict says it is not evidence: the sizes are tiny on purpose.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

import torch

from effkit import lesson_record, measure
from effkit.abtest import ABResult, Verdict, compare, verdict
from effkit.measure import device_name
from effkit.profiling import quiet_kineto

quiet_kineto()  # lessons 1 and 10 profile: no tracer markers in their outputs (effkit.profiling)

PROFILES = ("smoke", "cpu", "gpu")
MIN_PAIRS = 6  # the fewest pairs whose [x_(1), x_(n)] interval covers the median >= 95%
WIDE = 2.0  # an interval whose ends differ by more than this factor supports no conclusion
SMOKE_NOTE = "smoke profile: tiny sizes to test the notebook runs — not evidence"


def profile() -> str:
    """The lesson profile: ``$EFFKIT_PROFILE`` if set, else ``gpu`` with CUDA, else ``cpu``."""
    chosen = os.environ.get("EFFKIT_PROFILE", "").strip().lower()
    if chosen:
        if chosen not in PROFILES:
            raise ValueError(f"EFFKIT_PROFILE={chosen!r}: choose one of {PROFILES}")
        return chosen
    return "gpu" if torch.cuda.is_available() else "cpu"


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def ab(
    name: str,
    a: Callable[[], object],
    b: Callable[[], object],
    *,
    pairs: int = MIN_PAIRS,
    max_pairs: int | None = None,
    rel_ci: float = 0.10,
    a_label: str = "A",
    b_label: str = "B",
    unit: str = "samples/s",
    threshold: float = 1.0,
    dev: torch.device | None = None,
    quiet: bool = False,
    before: Callable[[str], None] | None = None,
    after: Callable[[str], None] | None = None,
) -> ABResult:
    """`compare(a, b)` for ``pairs`` pairs, then more (up to ``max_pairs``, default 2 x ``pairs``)
    until the interval is tight (half-width <= ``rel_ci`` of the ratio); prints the verdict.

    Each callable does one burst of work and returns its sample count. The result carries the
    verdict as ``result.verdict`` (see `effkit.abtest.verdict`), reworded as "no evidence either
    way" when the interval is wider than a factor ``WIDE``, and marked as not evidence in smoke.
    ``before``/``after`` run untimed around each burst (see `effkit.abtest.compare`).
    """
    from tqdm.auto import tqdm

    if pairs < MIN_PAIRS:
        raise ValueError(
            f"{pairs} pairs: an interval from < {MIN_PAIRS} pairs covers the median"
            " less than 95% of the time; use more pairs, shorter bursts"
        )
    dev = dev or device()
    if max_pairs is None:  # smoke is never evidence: adding pairs there would only cost CI time
        max_pairs = pairs if profile() == "smoke" else 2 * pairs
    max_pairs = max(pairs, max_pairs)
    bar = tqdm(total=max_pairs, desc=name, unit="pair")

    def tick(done: int, ratio: float) -> None:
        bar.update(1)
        bar.set_postfix(ratio=f"{ratio:.2f}x")

    result = compare(
        a,
        b,
        device=dev,
        min_pairs=pairs,
        max_pairs=max_pairs,
        rel_ci=rel_ci,
        progress=tick,
        before=before,
        after=after,
    )
    bar.close()
    result.verdict = lesson_verdict(result, a_label, b_label, threshold)  # type: ignore[attr-defined]
    if not quiet:
        print(
            f"{name}, on {device_name(dev)}: {a_label} {result.a_median:,.0f} {unit},"
            f" {b_label} {result.b_median:,.0f} {unit} (medians)"
        )
        print(f"  -> {result.verdict}")
    return result


def inference_burst(model: Callable[..., object], inputs: dict, repeats: int) -> Callable[[], int]:
    """A burst for `ab()`: ``repeats`` calls of ``model(**inputs)`` under `torch.no_grad`;
    returns the rows served (``repeats`` x the batch of ``inputs``' first tensor)."""

    def run() -> int:
        with torch.no_grad():
            for _ in range(repeats):
                model(**inputs)
        return repeats * next(iter(inputs.values())).shape[0]

    return run


def data_location(chosen: str | None = None) -> dict[str, str]:
    """Where each workload's data comes from in profile ``chosen`` — printed, nothing downloaded.

    Offline, the cpu/gpu profiles need the data on disk: point ``$EFFKIT_SST2_DIR`` at a folder of
    SST-2 TSVs and ``$EFFKIT_CIFAR_DIR`` at one holding ``cifar-10-batches-py/``.
    """
    from effkit.workloads.bert.data import cache_root
    from effkit.workloads.bert.profiles import get_profile as bert_profile
    from effkit.workloads.cifar.data import data_home, has_cifar
    from effkit.workloads.cifar.profiles import get_profile as cifar_profile

    chosen = chosen or profile()
    found = {}
    if bert_profile(chosen).data == "synthetic":
        found["SST-2"] = "synthetic sentences in GLUE's format, generated into the cache (smoke)"
    elif os.environ.get("EFFKIT_SST2_DIR"):
        found["SST-2"] = f"$EFFKIT_SST2_DIR = {os.environ['EFFKIT_SST2_DIR']}"
    elif all((cache_root() / "sst2" / f"{s}.tsv").is_file() for s in ("train", "dev", "test")):
        found["SST-2"] = f"the cache, {cache_root() / 'sst2'}"
    else:
        found["SST-2"] = (
            f"a download from the Hugging Face hub on first use, once, into {cache_root() / 'sst2'}"
            " (needs internet and the course extra's `datasets`; offline: set EFFKIT_SST2_DIR to"
            " a folder of GLUE's SST-2 TSVs)"
        )
    kind = cifar_profile(chosen).data
    real = data_home() / "real"
    if kind == "synthetic":
        found["CIFAR-10"] = (
            "synthetic images in CIFAR-10's format, generated into the cache (smoke)"
        )
    elif os.environ.get("EFFKIT_CIFAR_DIR"):
        found["CIFAR-10"] = f"$EFFKIT_CIFAR_DIR = {os.environ['EFFKIT_CIFAR_DIR']}"
    elif has_cifar(real):
        found["CIFAR-10"] = f"the cache, {real}"
    elif kind == "real-or-synthetic":
        found["CIFAR-10"] = (
            "a SYNTHETIC stand-in (no real CIFAR-10 found: set EFFKIT_CIFAR_DIR for"
            " real images; accuracies on it say nothing about CIFAR-10)"
        )
    else:
        found["CIFAR-10"] = (
            "a torchvision download on first use (needs internet; offline: set EFFKIT_CIFAR_DIR)"
        )
    return found


def lesson_verdict(
    result: ABResult, a_label: str = "A", b_label: str = "B", threshold: float = 1.0
) -> Verdict:
    """`effkit.abtest.verdict`, saying "no evidence either way" for a uselessly wide interval and
    "not evidence" in the smoke profile."""
    said = verdict(result, a_label, b_label, threshold)
    sentence = said.sentence
    if said.word == "no clear difference" and result.ci_high > WIDE * result.ci_low:
        sentence = (
            f"no evidence either way about {b_label} vs {a_label}: the interval"
            f" {result.ci_low:.2f}-{result.ci_high:.2f} (ratio {result.ratio:.2f}x, covering the"
            f" median {result.coverage:.0%} of the time over {result.pairs} pairs) is too wide to"
            " say anything — the machine was too noisy or the bursts too short"
        )
    if profile() == "smoke":
        sentence = f"{sentence} [{SMOKE_NOTE}]"
    return Verdict(said.word, sentence)


def plot_ab(results: dict[str, ABResult], title: str, ax=None):
    """One bar per A/B: its median ratio B/A with its interval; bars green/red/grey by verdict."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(1.8 + 1.9 * len(results), 3.4))
    colours = {"faster": "tab:green", "slower": "tab:red"}
    names = list(results)
    ratios = [r.ratio for r in results.values()]
    errors = [
        [r.ratio - r.ci_low for r in results.values()],
        [r.ci_high - r.ratio for r in results.values()],
    ]
    words = [getattr(r, "verdict", verdict(r)).word for r in results.values()]
    bars = ax.bar(
        names, ratios, yerr=errors, capsize=6, color=[colours.get(w, "tab:gray") for w in words]
    )
    ax.bar_label(bars, labels=[f"{r:.2f}x" for r in ratios], label_type="center", color="white")
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    coverage = min(r.coverage for r in results.values())
    ax.set(ylabel=f"speed B/A (median; interval\ncovers it >= {coverage:.0%})", title=title)
    return ax


def summary_header(number: int, device_label: str, extra: str = "") -> str:
    """The first line of a lesson's summary cell; in smoke, a second line saying it is not evidence.

    Every summary prints measured numbers; a smoke run's numbers come from tiny sizes chosen to
    test that the notebook runs, so the header says so before any of them is read as a result.
    """
    line = f"Summary — lesson {number}, profile {profile()!r}, measured on {device_label}{extra}"
    if profile() == "smoke":
        line += (
            f"\n[{SMOKE_NOTE}: no figure below supports a conclusion; run the cpu or gpu profile]"
        )
    return line


def cifar_data_note(trainer) -> str:
    """ "; CIFAR data: ..." for a summary header: which CIFAR a lesson's trainer ran on, stand-in or real."""
    data = trainer.describe().get("data")
    return "; CIFAR data: " + (
        "the synthetic stand-in, not CIFAR-10" if data == "synthetic" else f"{data}"
    )


def check_guess(guess: float | None, measured: float, what: str, fmt: str = "{:.2f}") -> None:
    """Print a learner's prediction next to the measurement (or a reminder to write one);
    in smoke the line says the measurement is not evidence."""
    shown = fmt.format(measured)
    if guess is None:
        line = f"{what}: measured {shown}. (No guess written: set it above, then re-run.)"
    else:
        off = measured / guess if guess else float("inf")
        line = f"{what}: you guessed {fmt.format(guess)}, measured {shown} ({off:.2g}x your guess)"
    if profile() == "smoke":
        line += f" [{SMOKE_NOTE}]"
    print(line)


def _plain(text: str) -> str:
    """Lowercase, hyphens as spaces, runs of whitespace as one space: "All-reduce" ~ "all reduce"."""
    return " ".join(text.lower().replace("-", " ").split())


def written_answer(
    answer: str, key_points: dict[str, tuple[str, ...]], min_words: int = 12
) -> list[str]:
    """Print which key points a learner's written answer mentions; return those points.

    A point counts as mentioned when any of its phrases starts a word of the answer, ignoring case,
    hyphens and line breaks ("pad" matches "padding" and "Padded", not "keypad"). Fewer than
    ``min_words`` words: a reminder to write the answer, and ``[]`` — never an error, since CI runs
    the lessons with ``ANSWER`` left empty. A keyword self-check for the learner, not a grade.
    """
    if not isinstance(answer, str):
        raise TypeError(
            f'written_answer: the answer must be a str (your ANSWER = """..."""),'
            f" got {type(answer).__name__}"
        )
    for point, phrases in key_points.items():
        if isinstance(phrases, str) or not all(isinstance(p, str) for p in phrases):
            raise TypeError(
                f"written_answer: key point {point!r} needs a tuple of str phrases,"
                f" got {phrases!r} (one phrase: write ({phrases!r},))"
            )
    words = len(answer.split())
    if words < min_words:
        print(
            f"Write your answer (2-3 sentences) in the ANSWER string above, then run this cell"
            f" again ({words} words so far)."
        )
        return []
    text = _plain(answer)
    mentioned = [
        point
        for point, phrases in key_points.items()
        if any(re.search(r"(?<!\w)" + re.escape(_plain(p)), text) for p in phrases)
    ]
    for point in key_points:
        print(
            f"✓ you mention: {point}"
            if point in mentioned
            else f"· a full answer also says: {point}"
        )
    print(
        "(A self-check against the key points, by keywords — not a grade: reread the lesson for any"
        " point you missed.)"
    )
    return mentioned


def key_points(lesson_number: int) -> dict[str, tuple[str, ...]]:
    """Lesson ``lesson_number``'s key points, as its manifest (``grader/assignments/<id>/manifest.py``)
    declares them: one place per lesson, so a new lesson touches no table here. Read through the
    ``effkit.key_points`` entry point (the course's grader provides it): effkit never imports grader."""
    found: dict[int, dict[str, tuple[str, ...]]] = {}
    for provider in entry_points(group="effkit.key_points"):
        found.update(provider.load()())
    if lesson_number not in found:
        raise KeyError(
            f"check_answer: no key points for lesson {lesson_number}; lessons with"
            f" key points: {sorted(found)}"
        )
    return found[lesson_number]


def check_answer(answer: str, lesson_number: int, min_words: int = 12) -> list[str]:
    """`written_answer` against lesson ``lesson_number``'s key points (`key_points`), kept out of
    the notebook so the learner sees them only after writing an answer."""
    return written_answer(answer, key_points(lesson_number), min_words)


# FLOP per cycle per core, dense, by precision, for the widest unit with that precision [Intel 64 and
# IA-32 Architectures Optimization Reference Manual]: fp32 with AVX-512 is 2 FMA units x 16 lanes x
# 2 = 64 (an upper figure: Xeons with one 512-bit FMA unit do 32, and /proc/cpuinfo does not say
# which); AVX2 2 x 8 x 2 = 32; bf16 with AMX 1024 (Intel's Sapphire Rapids figure, "1024 BF16
# operations per cycle": one 16x16x32 tile multiply-add, 8192 multiply-adds, every 16 cycles).
_CPU_FLOP_PER_CYCLE = {
    ("avx512f", "fp32"): 64,
    ("avx2", "fp32"): 32,
    ("amx_bf16", "bf16"): 1024,
    ("avx512_bf16", "bf16"): 128,
}
# AMD Zen 4 (family 0x19, the first AMD cores with AVX-512) runs 512-bit instructions on 256-bit
# datapaths: half the 512-bit figures [AMD, Software Optimization Guide for the AMD Zen4
# Microarchitecture]. Zen 3, the same family, has no AVX-512 flags at all.
_ZEN4_FLOP_PER_CYCLE = {("avx512f", "fp32"): 32, ("avx512_bf16", "bf16"): 64}
_UPPER = {
    ("avx512f", "fp32"): "an upper figure: 32 with one 512-bit FMA unit, as on some Xeons",
    ("avx512_bf16", "bf16"): "an upper figure: 64 with one 512-bit FMA unit, as on some Xeons",
}


def cpu_flop_per_cycle(
    precision: str, flags: set[str], vendor: str = "", family: int | None = None
) -> tuple[int | None, str]:
    """(dense FLOP per cycle per core of the widest unit for ``precision``, why that figure), from
    /proc/cpuinfo's flags, vendor and family: AMD's Zen 4 gets its own, halved AVX-512 figures."""
    zen4 = vendor == "AuthenticAMD" and family == 0x19
    found = [
        ((_ZEN4_FLOP_PER_CYCLE if zen4 else {}).get(key, f), key)
        for key, f in _CPU_FLOP_PER_CYCLE.items()
        if key[1] == precision and key[0] in flags
    ]
    if not found:
        return None, ""
    per_cycle, key = max(found)
    if zen4 and key in _ZEN4_FLOP_PER_CYCLE:
        return per_cycle, f"{key[0]}, AMD Zen 4: 512-bit instructions on 256-bit datapaths"
    return per_cycle, key[0] + (f"; {_UPPER[key]}" if key in _UPPER else "")


def _cpuinfo_field(info: str, field: str) -> str:
    line = next((ln for ln in info.splitlines() if ln.split(":")[0].strip() == field), "")
    return line.split(":", 1)[1].strip() if ":" in line else ""


def peak_flops_for(dev: torch.device, precision: str = "fp32") -> tuple[float | None, str]:
    """(dense peak FLOP/s of ``precision`` on ``dev``, where that figure comes from).

    GPUs: `effkit.measure.peak_flops` (datasheet table). CPUs: physical cores x clock x FLOP per
    cycle of the widest unit for that precision (`cpu_flop_per_cycle`), from /proc/cpuinfo and the
    sysfs topology: an *estimate* (a VM shows the topology and often the base clock its hypervisor
    presents). Cores, not threads: two hardware threads of one core share its vector units.
    """
    name = device_name(dev)
    if dev.type == "cuda":
        peak = measure.peak_flops(name, precision=precision, device_type="cuda")
        return peak, f"datasheet {precision} peak of {name}"
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = set(re.findall(r"\b[\w.]+\b", _cpuinfo_field(info, "flags")))
    family = _cpuinfo_field(info, "cpu family")
    per_cycle, why = cpu_flop_per_cycle(
        precision,
        flags,
        _cpuinfo_field(info, "vendor_id"),
        int(family) if family.isdigit() else None,
    )
    if per_cycle is None:
        return None, f"no {precision} estimate for this CPU"
    mhz = [float(ln.split(":")[1]) for ln in info.splitlines() if ln.startswith("cpu MHz")]
    clock = max(mhz, default=2500.0) * 1e6
    threads = torch.get_num_threads()
    cores = min(threads, physical_cores())
    return cores * clock * per_cycle, (
        f"{precision} estimate: {cores} cores (of {threads} threads) x {clock / 1e9:.2f} GHz x "
        f"{per_cycle} FLOP/cycle ({why})"
    )


def physical_cores(sysfs: Path = Path("/sys/devices/system/cpu"), cpus=None) -> int:
    """Distinct physical cores among ``cpus`` (default: those this process may run on), from the
    sysfs topology: hardware threads of one core (SMT) count once; a CPU without topology, as one."""
    if cpus is None:
        cpus = (
            os.sched_getaffinity(0)
            if hasattr(os, "sched_getaffinity")
            else range(os.cpu_count() or 1)
        )
    cores = set()
    for cpu in cpus:
        top = sysfs / f"cpu{cpu}" / "topology"
        try:
            cores.add(((top / "physical_package_id").read_text(), (top / "core_id").read_text()))
        except OSError:
            cores.add(("cpu", str(cpu)))  # no topology: count the CPU as a core of its own
    return max(len(cores), 1)


if __name__ == "__main__":
    lesson_record.main()  # build | run | record
