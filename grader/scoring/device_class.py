"""The device class a grading ran on, as its report records it: a GPU's name, or the CPU's model and
the ISA that decides its training speed and numerics (AMX, AVX512-BF16, AVX512, AVX2)."""

from __future__ import annotations

import torch

from effkit.amp import cpu_isa
from effkit.measure import cpu_model
from grader.common.device import default_device
from grader.scoring.report import DeviceInfo


def device_info(device: str | None = None) -> DeviceInfo:
    """``device`` (default: CUDA when there is one, else the CPU) as a ``DeviceInfo``."""
    device = device or default_device()
    if device.startswith("cuda"):
        return DeviceInfo(kind="gpu", model=torch.cuda.get_device_name(0))
    return DeviceInfo(kind="cpu", model=cpu_model(), isa=cpu_isa())
