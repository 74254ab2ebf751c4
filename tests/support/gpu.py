"""What the GPU lane (tests/gpu) shares: which device it runs on and why a test is skipped."""

import os

import pytest
import torch

# benchmarks/gpu_check.sh sets it on a machine without a GPU: the lane then rehearses on the CPU.
ON_CPU = os.environ.get("TEXTMILL_GPU_LANE_ON_CPU") == "1"


def no_gpu_reason() -> str:
    build = "a CPU build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
    return f"no CUDA device: torch {torch.__version__} is {build} and sees no GPU"


def needs_cuda(device: torch.device, what: str) -> None:
    """Skip a test that only a GPU can answer, naming what it checks."""
    if device.type != "cuda":
        pytest.skip(f"{what} needs CUDA ({no_gpu_reason()})")
