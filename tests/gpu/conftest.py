"""The GPU lane: `python -m pytest tests/gpu` on a machine with an NVIDIA GPU (benchmarks/gpu_check.sh runs it).

Where CUDA is absent every test is skipped, saying why. With TEXTMILL_GPU_LANE_ON_CPU=1 (gpu_check.sh sets it on a
machine without a GPU) the lane rehearses on the CPU instead: the same tests on the same small shapes, gloo for
NCCL, and what only a GPU can answer (the offload stream, the fused kernel, peak memory) skipped with its reason,
so a typo costs no GPU time. The lane's tests run in one process: they share one GPU."""

import pytest
import torch

from support.gpu import ON_CPU, no_gpu_reason


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    skip = None if torch.cuda.is_available() or ON_CPU else pytest.mark.skip(reason=no_gpu_reason())
    for item in items:
        if "gpu" in item.path.parts:
            item.add_marker(pytest.mark.xdist_group("gpu"))
            if skip:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def device() -> torch.device:
    """The GPU, or the CPU when the lane rehearses there."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
