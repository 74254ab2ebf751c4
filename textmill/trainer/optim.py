"""AdamW with Megatron's parameter groups and learning-rate schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from textmill.trainer.device import torch_version


def parameter_groups(params: list[nn.Parameter], weight_decay: float) -> list[dict]:
    """Weight decay on matrices only: biases and norm scales (1-D) are not decayed, as in Megatron.
    Distributed (DTensor) and plain parameters go in separate groups: the fused and multi-tensor kernels
    take one kind at a time (under tensor parallelism without sharding, the norms stay plain)."""
    from torch.distributed.tensor import DTensor

    groups: dict[tuple[bool, bool], list] = {}
    for p in params:
        if p.requires_grad:
            groups.setdefault((p.ndim >= 2, isinstance(p, DTensor)), []).append(p)
    return [{"params": ps, "weight_decay": weight_decay if decay else 0.0}
            for (decay, _), ps in sorted(groups.items(), reverse=True)]


def make_optimizer(params: list[nn.Parameter], lr: float, weight_decay: float, betas: tuple[float, float],
                   eps: float) -> torch.optim.Optimizer:
    """torch's AdamW: fused where it may be (one kernel over all of a group's tensors, DTensors included),
    else multi-tensor (foreach). Never NVIDIA Apex's FusedAdam, though NVIDIA's containers ship it: its
    kernel takes `p.data` lists, which a DTensor's storage-less wrapper cannot give (FSDP2, tensor and
    pipeline parallel runs would fail at the first step), and it keeps Adam's step count outside the state
    a checkpoint saves."""
    groups = parameter_groups(params, weight_decay)
    if fused_supported(groups):
        try:
            return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True)
        except (RuntimeError, TypeError):  # a device without a fused kernel
            pass
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, foreach=True)


def fused_supported(groups: list[dict], version: str = torch.__version__) -> bool:
    """Whether the fused kernel takes these groups: before torch 2.9 it fails on a group whose DTensors
    lie on different meshes (FSDP2 with tensor parallelism shards the norms on one mesh, the matrices on
    two; pytorch#157682)."""
    if torch_version(version) >= (2, 9):
        return True
    from torch.distributed.tensor import DTensor

    for group in groups:
        if len({p.device_mesh for p in group["params"] if isinstance(p, DTensor)}) > 1:
            return False
    return True


@dataclass
class LRSchedule:
    """Megatron's OptimizerParamScheduler for --train-iters runs: linear warmup from 0 to `max_lr` over
    `warmup_iters`, then cosine / linear / constant decay to `min_lr` at `decay_iters`, `min_lr` after.
    `lr(n)` is the rate of the step taken after n completed iterations (the first step uses lr(0))."""

    max_lr: float
    min_lr: float
    warmup_iters: int
    decay_iters: int
    style: Literal["cosine", "linear", "constant"] = "cosine"

    def lr(self, n: int) -> float:
        if self.warmup_iters > 0 and n <= self.warmup_iters:
            return self.max_lr * n / self.warmup_iters
        if self.style == "constant":
            return self.max_lr
        if n > self.decay_iters:
            return self.min_lr
        ratio = (n - self.warmup_iters) / max(1, self.decay_iters - self.warmup_iters)
        if self.style == "linear":
            coeff = 1.0 - ratio
        elif self.style == "cosine":
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        else:
            raise ValueError(f"unknown --lr-decay-style {self.style}")
        return self.min_lr + coeff * (self.max_lr - self.min_lr)
