"""What the trainer decides about NVIDIA GPUs without one: the GPU each process takes, the peak its MFU is
measured against, the torch it needs, and the optimizer it builds when NVIDIA's Apex is installed."""

import re
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from textmill.errors import TextmillError
from textmill.trainer.device import TORCH_FLOOR, cuda_index, peak_for, pick_device, require_torch, torch_version
from textmill.trainer.optim import fused_supported, make_optimizer

REPOSITORY = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name,dtype,tf32,peak", [
    ("NVIDIA H100 80GB HBM3", torch.bfloat16, False, 989.4),  # the SXM part names no form factor
    ("NVIDIA H100 PCIe", torch.bfloat16, False, 756.5),
    ("NVIDIA H100 NVL", torch.float16, False, 835.5),
    ("NVIDIA H200", torch.bfloat16, False, 989.4),
    ("NVIDIA H800", torch.bfloat16, False, 989.4),
    ("NVIDIA A100-SXM4-80GB", torch.bfloat16, False, 312.0),
    ("NVIDIA A10", torch.bfloat16, False, 125.0),
    ("NVIDIA A10G", torch.bfloat16, False, None),  # not an A10: --peak-tflops
    ("NVIDIA GB200", torch.bfloat16, False, 2500.0),
    ("NVIDIA B200", torch.bfloat16, False, 2250.0),
    ("NVIDIA H100 80GB HBM3", None, True, 494.7),  # fp32 products on TF32 tensor cores
    ("NVIDIA H100 80GB HBM3", None, False, 66.9),  # plain fp32
    ("NVIDIA B200", None, True, None),
    ("Some GPU", torch.bfloat16, False, None),
])
def test_mfu_is_measured_against_the_peak_of_the_gpu_model_and_precision(name, dtype, tf32, peak):
    assert peak_for(name, dtype, tf32) == peak


def test_each_process_takes_its_own_gpu_even_when_it_sees_only_one(monkeypatch):
    assert [cuda_index(rank, 8) for rank in (0, 7)] == [0, 7]
    assert [cuda_index(rank, 1) for rank in range(4)] == [0, 0, 0, 0]  # Slurm --gpus-per-task=1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(TextmillError, match="every process of this machine on one GPU"):
        pick_device("cuda:1", 1)


def test_an_older_torch_stops_at_start_up_in_one_line_naming_the_version_needed():
    with pytest.raises(TextmillError) as raised:
        require_torch("2.5.1+cu124")
    assert "\n" not in str(raised.value) and "torch 2.6 or newer" in str(raised.value)
    require_torch("2.6.0")
    assert torch_version("2.9.0a0+50eac81.nv25.09") == (2, 9)
    declared = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]["dependencies"]
    [torch_floor] = [re.fullmatch(r"torch>=(\d+)\.(\d+)", d) for d in declared if d.startswith("torch")]
    assert (int(torch_floor[1]), int(torch_floor[2])) == TORCH_FLOOR


def test_the_optimizer_is_torchs_adamw_even_where_apex_is_installed(tmp_path, monkeypatch):
    # A stand-in for NVIDIA's apex package (not on PyPI; its FusedAdam cannot take DTensors): importing it
    # fails the test.
    (tmp_path / "apex" / "optimizers").mkdir(parents=True)
    (tmp_path / "apex" / "__init__.py").write_text("")
    (tmp_path / "apex" / "optimizers" / "__init__.py").write_text("raise AssertionError('apex was imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    params = [torch.nn.Parameter(torch.ones(4, 4)), torch.nn.Parameter(torch.ones(4))]
    optimizer = make_optimizer(params, 1e-3, 0.1, (0.9, 0.95), 1e-8)
    assert type(optimizer) is torch.optim.AdamW and "apex.optimizers" not in sys.modules
    assert optimizer.defaults["fused"] and [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]
    assert fused_supported(optimizer.param_groups, "2.6.0")  # plain tensors: one kind per group
