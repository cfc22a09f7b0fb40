"""Peak FLOP/s: exact GPU models, the precision the run used, never a GPU entry for a CPU."""

import pytest
import torch

from effkit.measure import PEAK_FLOPS, gpu_model, mfu, peak_flops, run_precision

# How torch.cuda.get_device_name spells each table entry (at least one real spelling each).
SPELLINGS = {
    "H100 SXM": ["NVIDIA H100 80GB HBM3", "NVIDIA H100", "NVIDIA H100 SXM5 80GB"],
    "H100 PCIe": ["NVIDIA H100 PCIe"],
    "H100 NVL": ["NVIDIA H100 NVL"],
    "H200 SXM": ["NVIDIA H200", "NVIDIA H200 141GB HBM3e"],
    "H200 NVL": ["NVIDIA H200 NVL"],
    "A100": [
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA A100 80GB PCIe",
    ],
    "A10": ["NVIDIA A10"],
    "L4": ["NVIDIA L4"],
    "L40": ["NVIDIA L40"],
    "L40S": ["NVIDIA L40S"],
    "RTX 4090": ["NVIDIA GeForce RTX 4090"],
    "RTX 3090": ["NVIDIA GeForce RTX 3090"],
    "V100 SXM2": ["Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"],
    "V100 PCIe": ["Tesla V100-PCIE-16GB"],
    "V100S PCIe": ["Tesla V100S-PCIE-32GB"],
    "T4": ["Tesla T4", "NVIDIA Tesla T4"],
}


def test_every_table_entry_has_a_tested_spelling():
    assert set(SPELLINGS) == set(PEAK_FLOPS)


@pytest.mark.parametrize("model, name", [(m, n) for m, ns in SPELLINGS.items() for n in ns])
def test_each_entry_matches_its_own_model_exactly(model, name):
    assert gpu_model(name) == model
    for precision, value in PEAK_FLOPS[model].items():
        assert peak_flops(name, precision=precision, device_type="cuda") == value
    assert peak_flops(name, precision="fp32") < peak_flops(name, precision="fp16")


@pytest.mark.parametrize(
    "name, not_model",
    [
        ("NVIDIA A10G", "A10"),  # AWS's A10G is a different part (no public datasheet: unknown)
        ("NVIDIA L40", "L4"),
        ("NVIDIA L40S", "L40"),
        ("NVIDIA L40S", "L4"),
        ("NVIDIA H100 PCIe", "H100 SXM"),
        ("NVIDIA H100 NVL", "H100 SXM"),
        ("NVIDIA H200 NVL", "H200 SXM"),
        ("NVIDIA RTX A1000", "A10"),
        ("NVIDIA A100-SXM4-80GB", "A10"),
    ],
)
def test_look_alike_names_are_told_apart(name, not_model):
    assert gpu_model(name) != not_model


def test_a_cpu_never_gets_a_gpu_peak():
    assert peak_flops("AMD A10-7850K Radeon R7", device_type="cpu") is None
    assert peak_flops("CPU AMD A10-7850K Radeon R7 (4 threads)", device_type="cuda") is None
    assert peak_flops("CPU Intel(R) Xeon(R) Processor (2 threads)", device_type="cpu") is None
    assert peak_flops("NVIDIA H100 80GB HBM3", device_type="cpu") is None


def test_precisions_a_gpu_lacks_have_no_peak_and_unknown_precisions_fail():
    assert peak_flops("Tesla T4", precision="bf16") is None  # no bf16 tensor cores
    assert peak_flops("Tesla V100-SXM2-16GB", precision="tf32") is None
    with pytest.raises(ValueError):
        peak_flops("NVIDIA H100 80GB HBM3", precision="int8")


def test_mfu_of_an_fp32_run_divides_by_the_fp32_peak():
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert run_precision("off", "cuda") == "fp32" and run_precision("bf16", "cuda") == "bf16"
        torch.backends.cuda.matmul.allow_tf32 = True
        assert run_precision("off", "cuda") == "tf32" and run_precision("off", "cpu") == "fp32"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    # cuDNN runs fp32 convolutions in TF32 by default: a CNN's "fp32" MFU uses the TF32 peak
    saved_conv = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True
        assert run_precision("off", "cuda", ops="conv") == "tf32"
        assert run_precision("off", "cpu", ops="conv") == "fp32"
        # no TF32 before Ampere (compute capability 8.0): a V100's or T4's "fp32" is fp32
        assert run_precision("off", "cuda", ops="conv", capability=(7, 5)) == "fp32"
        assert run_precision("off", "cuda", ops="conv", capability=(8, 0)) == "tf32"
        torch.backends.cudnn.allow_tf32 = False
        assert run_precision("off", "cuda", ops="conv") == "fp32"
    finally:
        torch.backends.cudnn.allow_tf32 = saved_conv
    a100 = "NVIDIA A100-SXM4-80GB"
    fp32 = mfu(1e9, 1e4, peak_flops(a100, precision="fp32"))
    assert fp32 == pytest.approx(1e13 / 19.5e12)
    assert fp32 > 10 * mfu(1e9, 1e4, peak_flops(a100, precision="bf16"))
