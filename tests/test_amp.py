import pytest
import torch

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
        torch.amp, "GradScaler", lambda dev, enabled: asked.append((dev, enabled)) or real("cpu", enabled=False)
    )
    choose_precision("cuda", "fp16", caps=T4).make_scaler()
    choose_precision("cuda", "bf16", caps=H100).make_scaler()
    choose_precision("cpu", "bf16", caps=CPU).make_scaler()
    choose_precision("cpu", "off", caps=CPU).make_scaler()
    assert asked == [("cuda", True), ("cuda", False), ("cpu", False), ("cpu", False)]


def test_real_cpu_scaler_is_a_no_op_for_bf16():
    scaler = choose_precision("cpu", "bf16").make_scaler()
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
