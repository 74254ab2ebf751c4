"""The parallel layout: world = pipeline x data x tensor parallel sizes, and the mesh over it.

Ranks are laid out as Megatron lays them out: tensor-parallel ranks are neighbours (fastest-varying),
then data-parallel, then pipeline stages, so the chattiest group stays inside a node.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from textmill.errors import TextmillError


@dataclass(frozen=True)
class ParallelDims:
    world: int = 1
    tp: int = 1
    pp: int = 1

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.pp)

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def check(self, num_layers: int, num_heads: int, global_batch: int, micro_batch: int) -> None:
        """One clear error naming the numbers for a layout that cannot work."""
        if self.world % (self.tp * self.pp):
            raise TextmillError(f"world size {self.world} is not divisible by --tensor-model-parallel-size {self.tp} "
                                f"x --pipeline-model-parallel-size {self.pp}")
        if num_heads % self.tp:
            raise TextmillError(f"--num-attention-heads {num_heads} is not divisible by --tensor-model-parallel-size {self.tp}")
        if num_layers % self.pp:
            raise TextmillError(f"--num-layers {num_layers} is not divisible by --pipeline-model-parallel-size {self.pp}")
        if global_batch % (micro_batch * self.dp):
            raise TextmillError(f"--global-batch-size {global_batch} is not divisible by --micro-batch-size {micro_batch} "
                                f"x data-parallel size {self.dp}")


def world_from_env() -> tuple[int, int, int]:
    """(world size, rank, local rank) as torchrun sets them; (1, 0, 0) for a plain process."""
    return int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))


def init_distributed(device: torch.device, timeout_minutes: float) -> None:
    """Join torchrun's process group: NCCL on GPUs, gloo on CPUs. Collectives time out rather than hang
    when a peer is lost."""
    if dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(minutes=timeout_minutes))


def build_mesh(dims: ParallelDims, device: torch.device):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dims.pp, dims.dp, dims.tp), mesh_dim_names=("pp", "dp", "tp"))


def shutdown() -> None:
    """Leave the process group cleanly (a barrier first: gloo can abort at exit without one)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
