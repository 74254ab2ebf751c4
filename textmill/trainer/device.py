"""The device a process computes on, and its peak speed (for MFU)."""

from __future__ import annotations

import torch

from textmill.errors import TextmillError

# Dense bf16/fp16 tensor-core peaks (TFLOP/s) for MFU; other devices need --peak-tflops.
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    """The device of this process: with several processes per machine, GPU number LOCAL_RANK."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise TextmillError("--device cuda, but torch sees no CUDA device")
    if name == "cuda":
        # A scheduler may show each process only its own GPU: LOCAL_RANK then exceeds the visible devices.
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device(name)


def device_peak_tflops(device: torch.device, given: float | None) -> float | None:
    if given:
        return given
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return next((v for k, v in PEAK_TFLOPS.items() if k in name), None)
    return None
