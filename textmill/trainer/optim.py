"""AdamW with Megatron's parameter groups and learning-rate schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only: biases and norm scales (1-D) are not decayed, as in Megatron."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float], eps: float) -> torch.optim.Optimizer:
    """NVIDIA Apex's FusedAdam when Apex is importable (never a dependency), else torch's fused AdamW
    where the device supports it, else its multi-tensor (foreach) AdamW."""
    groups = parameter_groups(model, weight_decay)
    device = next(model.parameters()).device
    if device.type == "cuda":
        try:
            from apex.optimizers import FusedAdam  # type: ignore[import-not-found]

            return FusedAdam(groups, lr=lr, betas=betas, eps=eps, adam_w_mode=True)
        except ImportError:
            pass
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, foreach=True)


@dataclass
class LRSchedule:
    """Megatron's OptimizerParamScheduler for --train-iters runs: linear warmup from 0 to `max_lr` over
    `warmup_iters`, then cosine / linear / constant decay to `min_lr` at `decay_iters`, `min_lr` after.
    `lr(n)` is the rate of the step taken after n completed iterations (the first step uses lr(0))."""

    max_lr: float
    min_lr: float
    warmup_iters: int
    decay_iters: int
    style: str = "cosine"

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
