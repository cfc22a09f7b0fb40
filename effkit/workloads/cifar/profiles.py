"""Run profiles for the CIFAR-10 workload: how much data, how long, which sizes, which target.

A `Profile` fixes what depends on the machine: the data, both recipes' schedule lengths and batch sizes,
the optimized net's widths, precision, ``channels_last``, ``torch.compile`` and the target. Targets are
per profile: smoke's, on synthetic data, says nothing about real CIFAR-10.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Profile:
    name: str
    data: str  # "synthetic" (always), "real-or-synthetic" (real if found), "real" (download)
    n_train: int  # synthetic set sizes
    n_test: int
    max_train: int | None  # use at most this many training images (None: all)
    max_test: int | None
    target: float  # held-out accuracy the optimized recipe trains to, in [0, 1]
    real_target: float | None  # the target when a "real-or-synthetic" profile finds real data
    eval_every_epochs: float  # evaluation cadence (train_to_target's eval_every, in epochs)
    # Naive recipe: torchvision ResNet + DataLoader, fp32, SGD(0.9), lr 0.1, wd 5e-4, batch 128.
    naive_depth: int  # torchvision ResNet-18 on GPUs; shallower/narrower only for 2-core CPUs
    naive_width: int  # stem width (64 in torchvision); stages are 1, 2, 4, 8 times it
    naive_epochs: float
    # Optimized recipe: airbench94-style net, data on device, label smoothing, Nesterov SGD.
    opt_widths: tuple[int, int, int]
    opt_epochs: float
    opt_batch: int
    opt_precision: str  # effkit.amp.choose_precision mode
    opt_channels_last: bool
    opt_compile: bool
    opt_tta: int  # test-time augmentation: 0 none, 1 mirror, 2 mirror + 1-px translations
    naive_batch: int = 128
    # On a CPU the optimized recipe's batch is measured among these (effkit.batch_probe); empty: opt_batch.
    opt_cpu_batches: tuple[int, ...] = ()
    synthetic_seed: int = 0  # the synthetic *dataset's* seed; the training seed is build()'s

    def synthetic_dir_name(self) -> str:
        return f"synthetic-{self.n_train}-{self.n_test}-seed{self.synthetic_seed}"


# Real CIFAR-10, airbench94 unchanged: batch 1024, 9.9 epochs, widths 64/256/256, TTA 2.
# bf16 autocast where the GPU has it (tensor cores), channels_last for cuDNN's NHWC kernels.
# torch.compile stays off: its ~1 min of compilation would dominate a ~3 s time-to-target;
# turn it on (compile=True) for repeated runs in one process. The other profiles scale it down.
# Hand-laid, one line per concern (data, target, naive recipe, optimized recipe): the formatter
# would put each keyword on a line of its own.
# fmt: off
_GPU = Profile(
    name="gpu", data="real", n_train=50000, n_test=10000, max_train=None, max_test=None,
    target=0.94, real_target=None, eval_every_epochs=1.0,
    naive_depth=18, naive_width=64, naive_epochs=15,
    opt_widths=(64, 256, 256), opt_epochs=9.9, opt_batch=1024, opt_precision="auto",
    opt_channels_last=True, opt_compile=False, opt_tta=2,
)

PROFILES: dict[str, Profile] = {
    # 2 CPU cores. Precision "auto" is measured per host (effkit.precision_probe). The naive net is
    # narrowed so that, as on a GPU, the per-image DataLoader pipeline is a real share of its step
    # time (lesson 2). The airbench net's middle block is narrowed as well (16/32/64; airbench's is
    # as wide as its last): on 2 cores its FLOPs set its speed
    # (benchmarks/results/cifar-smoke-widths-xeon-amx-2c.txt).
    "smoke": replace(
        _GPU, name="smoke", data="synthetic", n_train=4000, n_test=1000,
        # Synthetic data: the target sits near both recipes' plateau, not on the steep part
        # (benchmarks/results/effkit-notes.md).
        target=0.80, eval_every_epochs=0.25,
        naive_depth=10, naive_width=16, naive_epochs=2,
        opt_widths=(16, 32, 64), opt_epochs=2, opt_batch=250, opt_tta=0,
        opt_cpu_batches=(250, 125, 64),
    ),
    # Same machine class as smoke, real ResNet-18 for the naive recipe; the target is one both nets
    # reach on synthetic 10k (benchmarks/results/effkit-notes.md). real_target is a conservative guess
    # for a 10k-image subset of real CIFAR-10 (not validated: no real data offline).
    "cpu": replace(
        _GPU, name="cpu", data="real-or-synthetic", n_train=10000, n_test=2000,
        max_train=10000, max_test=2000,  # a few minutes on a CPU even with real CIFAR-10 present
        target=0.75, real_target=0.60, eval_every_epochs=0.5,
        naive_epochs=3,
        opt_widths=(32, 128, 128), opt_epochs=4, opt_batch=500, opt_tta=1,
    ),
    "gpu": _GPU,
}
# fmt: on

# train_to_target's eval_every is in steps, which differ per recipe; use trainer.eval_every.
DEFAULT_EVAL_EVERY = {name: p.eval_every_epochs for name, p in PROFILES.items()}  # in epochs


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"unknown CIFAR profile {name!r}; choose one of {tuple(PROFILES)}")
    return PROFILES[name]
