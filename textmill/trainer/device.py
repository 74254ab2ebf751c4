"""The device a process computes on, and its peak speed (for MFU)."""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

from textmill.errors import TextmillError


# The oldest torch the trainer runs on (pyproject.toml declares the same; a test holds them together):
# torch.nn.utils.get_total_norm and clip_grads_with_norm_, and torch.distributed.fsdp.fully_shard, came in 2.6.
TORCH_FLOOR = (2, 6)


def torch_version(version: str = torch.__version__) -> tuple[int, int]:
    """(major, minor) of a torch version string ("2.9.0a0+50eac81.nv25.09" is (2, 9))."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def require_torch(version: str = torch.__version__) -> None:
    """Stop at start-up, in one line, on a torch older than the trainer needs (not at its first step)."""
    if torch_version(version) < TORCH_FLOOR:
        floor = ".".join(map(str, TORCH_FLOOR))
        raise TextmillError(f"textmill's trainer needs torch {floor} or newer, and this is torch {version}: "
                            f"pip install 'torch>={floor}' (or use a newer NVIDIA PyTorch container)")


class Peak(NamedTuple):
    """Dense peaks of one GPU model (TFLOP/s, NVIDIA's data sheets, without sparsity): 16-bit tensor cores
    (bf16 and fp16), TF32 tensor cores, plain fp32. None where textmill does not know the figure."""

    half: float
    tf32: float | None
    fp32: float | None


# Matched against torch.cuda.get_device_name in this order: a more specific name before the names it holds
# ("H100 PCIe" before "H100", "GB200" before "B200"). The SXM parts report no form factor in their names.
# An A10G (AWS) is not an A10 and its peaks are not published with it: give --peak-tflops.
PEAKS = (
    ("H100 PCIe", Peak(756.5, 378.0, 51.2)),
    ("H100 NVL", Peak(835.5, 417.5, 60.0)),
    ("H100", Peak(989.4, 494.7, 66.9)),
    ("H200 NVL", Peak(835.5, 417.5, 60.0)),
    ("H200", Peak(989.4, 494.7, 66.9)),
    ("H800 PCIe", Peak(756.5, 378.0, 51.2)),
    ("H800", Peak(989.4, 494.7, 66.9)),
    ("A100", Peak(312.0, 156.0, 19.5)),
    ("A10G", None),
    ("A10", Peak(125.0, 62.5, 31.2)),
    ("L40S", Peak(362.05, 183.0, 91.6)),
    ("GB200", Peak(2500.0, None, None)),
    ("B200", Peak(2250.0, None, None)),
)


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    """The device of this process: with several processes per machine, GPU number LOCAL_RANK (modulo the
    GPUs it can see)."""
    if name.startswith("cuda:") and int(os.environ.get("LOCAL_WORLD_SIZE", 1)) > 1:
        raise TextmillError(f"--device {name} would put every process of this machine on one GPU; give --device "
                            "cuda (each process takes GPU LOCAL_RANK)")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise TextmillError("--device cuda, but torch sees no CUDA device")
    if name == "cuda":
        index = cuda_index(local_rank, torch.cuda.device_count())
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device(name)


def cuda_index(local_rank: int, visible: int) -> int:
    """The GPU of process LOCAL_RANK: a scheduler may show each process only its own GPU (Slurm's
    --gpus-per-task=1), and LOCAL_RANK then exceeds the visible devices."""
    return local_rank % visible


def peak_for(device_name: str, dtype: torch.dtype | None, tf32: bool) -> float | None:
    """The peak of a GPU model for the precision its products run in (None when unknown)."""
    peak = next((p for model, p in PEAKS if model in device_name), None)
    if peak is None:
        return None
    if dtype in (torch.bfloat16, torch.float16):
        return peak.half
    return peak.tf32 if tf32 else peak.fp32


def device_peak_tflops(device: torch.device, given: float | None, dtype: torch.dtype | None) -> float | None:
    if given:
        return given
    if device.type == "cuda":
        tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
        return peak_for(torch.cuda.get_device_name(device), dtype, tf32)
    return None
