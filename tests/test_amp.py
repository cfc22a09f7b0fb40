import pytest
import torch

from effkit import amp
from effkit.amp import AmpPolicy, DeviceCaps, choose_precision

H100 = DeviceCaps("cuda", "NVIDIA H100 80GB HBM3", bf16=True, fp16=True)
T4 = DeviceCaps("cuda", "Tesla T4", bf16=False, fp16=True)
CPU = DeviceCaps("cpu", "cpu", bf16=True, fp16=False)
OLD_CPU = DeviceCaps("cpu", "cpu", bf16=False, fp16=False)


@pytest.mark.parametrize(
    "caps, mode, scaler",
    [(H100, "bf16", False), (T4, "fp16", True), (CPU, "bf16", False), (OLD_CPU, "off", False)],
)
def test_auto_picks_precision_per_device(caps, mode, scaler):
    policy = choose_precision(caps.type, "auto", caps=caps)
    assert policy.mode == mode
    assert policy.needs_scaler is scaler


def test_scaler_enabled_only_for_fp16(monkeypatch):
    # Without a GPU, torch would disable a CUDA scaler itself; record what the policy asks for.
    asked = []
    real = torch.amp.GradScaler
    monkeypatch.setattr(
        torch.amp,
        "GradScaler",
        lambda dev, enabled: asked.append((dev, enabled)) or real("cpu", enabled=False),
    )
    choose_precision("cuda", "fp16", caps=T4).make_scaler()
    choose_precision("cuda", "bf16", caps=H100).make_scaler()
    choose_precision("cpu", "bf16", caps=CPU).make_scaler()
    choose_precision("cpu", "off", caps=CPU).make_scaler()
    assert asked == [("cuda", True), ("cuda", False), ("cpu", False), ("cpu", False)]


def test_real_cpu_scaler_is_a_no_op_for_bf16():
    scaler = choose_precision("cpu", "bf16", caps=CPU).make_scaler()  # any CPU, bf16 or not
    loss = torch.tensor(2.0, requires_grad=True)
    assert not scaler.is_enabled() and scaler.scale(loss) is loss


@pytest.mark.parametrize("caps, requested", [(CPU, "fp16"), (T4, "bf16")])
def test_impossible_precision_is_a_clear_error(caps, requested):
    with pytest.raises(ValueError, match=f"{requested} mixed precision cannot run"):
        choose_precision(caps.type, requested, caps=caps)


def test_unknown_mode_rejected():
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        choose_precision("cpu", "fp8")


def test_cpu_autocast_really_runs_matmul_in_bf16_and_off_keeps_fp32():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with choose_precision("cpu", "bf16").autocast():
        assert (a @ b).dtype == torch.bfloat16
    with AmpPolicy("cpu", "off").autocast():
        assert (a @ b).dtype == torch.float32


# --- DeviceCaps.detect itself: native capability only (probes monkeypatched) ----------------------
@pytest.mark.parametrize(
    "capability, name, mode",
    [
        ((7, 5), "Tesla T4", "fp16"),
        ((7, 0), "Tesla V100-SXM2-16GB", "fp16"),
        ((8, 0), "NVIDIA A100-SXM4-80GB", "bf16"),
        ((9, 0), "NVIDIA H100 80GB HBM3", "bf16"),
    ],
)
def test_detect_cuda_uses_compute_capability_not_is_bf16_supported(
    monkeypatch, capability, name, mode
):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: capability)
    # torch answers True on a T4/V100 too (it counts emulation): detect must not ask it.
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    caps = DeviceCaps.detect("cuda:0")
    assert caps.bf16 is (capability >= (8, 0)) and caps.fp16 and caps.name == name
    policy = choose_precision("cuda", "auto", caps=caps)
    assert policy.mode == mode and policy.needs_scaler is (mode == "fp16")


CPUINFO = "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse avx2 avx512f {extra}\n"


@pytest.mark.parametrize(
    "extra, bf16",
    [
        ("", False),
        ("avx512_vnni", False),
        ("avx512_bf16", True),
        ("amx_tile amx_bf16 amx_int8", True),
    ],
)
def test_detect_cpu_bf16_only_with_amx_or_avx512_bf16(monkeypatch, tmp_path, extra, bf16):
    from effkit import amp

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO.format(extra=extra))
    monkeypatch.setattr(amp, "CPUINFO_PATH", str(cpuinfo))
    caps = DeviceCaps.detect("cpu")
    assert caps.bf16 is bf16 and caps.fp16 is False
    assert choose_precision("cpu", "auto", caps=caps).mode == ("bf16" if bf16 else "off")


def test_both_workloads_resolve_precision_through_the_one_policy(monkeypatch):
    from effkit import amp
    from effkit.workloads.cifar import recipes as cifar_recipes

    monkeypatch.setattr(amp, "cpu_native_bf16", lambda cpuinfo=None: False)
    assert cifar_recipes.resolve_precision(torch.device("cpu"), "auto").mode == "off"
    assert choose_precision("cpu", "auto").mode == "off"
    monkeypatch.setattr(amp, "cpu_native_bf16", lambda cpuinfo=None: True)
    assert cifar_recipes.resolve_precision(torch.device("cpu"), "auto").mode == "bf16"
    assert choose_precision("cpu", "auto").mode == "bf16"


def test_cpu_features_name_the_bf16_units_from_the_kernel_flags():
    """The course's CPU moved from an AVX2-only EPYC to one with AVX512-BF16 under the same model
    name: results record the flags, and the bf16 verdict follows them."""
    avx2 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"
    bf16 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n"
    a, b = amp.cpu_features(avx2), amp.cpu_features(bf16)
    assert a["flags"] == ["avx2"] and not a["native_bf16"]
    assert b["flags"] == ["avx512_bf16", "avx512f", "avx2"] and b["native_bf16"]
    assert "bf16 emulated" in amp.describe_cpu(
        a
    ) and "avx512_bf16: native bf16" in amp.describe_cpu(b)
    here = amp.cpu_features()
    assert here["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    assert here["native_bf16"] == amp.cpu_native_bf16()
