"""The parallel layout: world = pipeline x data x tensor parallel sizes, and the mesh over it.

Ranks are laid out as Megatron lays them out: tensor-parallel ranks are neighbours (fastest-varying),
then data-parallel, then pipeline stages, so the chattiest group stays inside a node.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Iterator

from textmill.errors import RunFailed, TextmillError

if TYPE_CHECKING:  # torch is imported by what makes a process group; the layout checks need none
    import torch


@dataclass(frozen=True)
class ParallelDims:
    world: int = 1
    tp: int = 1
    pp: int = 1
    virtual: int = 1  # pipeline stages per pipeline rank (interleaved schedule)

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.pp)

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def to_dict(self) -> dict:
        return {"world": self.world, "dp": self.dp, "tp": self.tp, "pp": self.pp, "virtual": self.virtual}

    def describe(self, config) -> str:
        sharded = config.use_distributed_optimizer or (self.dp > 1 and self.world > self.dp)
        parts = [f"data parallel {self.dp}" + (", sharded optimizer" if sharded else "")]
        if self.tp > 1:
            parts.append(f"tensor parallel {self.tp}" + (" + sequence parallel" if config.sequence_parallel else ""))
        if self.pp > 1:
            parts.append(f"pipeline parallel {self.pp}" + (f" x {self.virtual} virtual stages" if self.virtual > 1 else ""))
        return ", ".join(parts)

    def check(self, model_config, global_batch: int, micro_batch: int) -> None:
        """One clear error naming the numbers for a layout that cannot work."""
        if self.world % (self.tp * self.pp):
            raise TextmillError(f"world size {self.world} is not divisible by --tensor-model-parallel-size {self.tp} "
                                f"x --pipeline-model-parallel-size {self.pp}")
        if model_config.num_attention_heads % self.tp:
            raise TextmillError(f"--num-attention-heads {model_config.num_attention_heads} is not divisible by "
                                f"--tensor-model-parallel-size {self.tp}")
        # Each rank holds whole query groups (G divisible by TP, as Megatron-core requires), or, with fewer
        # groups than ranks, its group's keys and values replicated (TP divisible by G).
        if model_config.kv_heads % self.tp and self.tp % model_config.kv_heads:
            raise TextmillError(f"--num-query-groups {model_config.kv_heads} and --tensor-model-parallel-size {self.tp}: "
                                "one must divide the other")
        if model_config.ffn_hidden_size % self.tp:
            raise TextmillError(f"--ffn-hidden-size {model_config.ffn_hidden_size} is not divisible by "
                                f"--tensor-model-parallel-size {self.tp}")
        if model_config.vocab_size % self.tp:
            raise TextmillError(f"the padded vocabulary ({model_config.vocab_size} rows) is not divisible by "
                                f"--tensor-model-parallel-size {self.tp}; choose --make-vocab-size-divisible-by accordingly")
        if model_config.num_layers % (self.pp * self.virtual):
            raise TextmillError(f"--num-layers {model_config.num_layers} is not divisible by "
                                f"--pipeline-model-parallel-size {self.pp}")
        if global_batch % (micro_batch * self.dp):
            raise TextmillError(f"--global-batch-size {global_batch} is not divisible by --micro-batch-size {micro_batch} "
                                f"x data-parallel size {self.dp}")
        micro_batches = global_batch // (micro_batch * self.dp)
        if self.pp > 1 and (micro_batches < self.pp or (self.virtual > 1 and micro_batches % self.pp)):
            raise TextmillError(f"--pipeline-model-parallel-size {self.pp} needs at least {self.pp} micro-batches per step"
                                + (" and a multiple of it (interleaved schedule)" if self.virtual > 1 else "")
                                + f"; --global-batch-size {global_batch} / (--micro-batch-size {micro_batch} x data-parallel "
                                f"size {self.dp}) gives {micro_batches}")


def world_from_env() -> tuple[int, int, int]:
    """(world size, rank, local rank) as torchrun sets them; (1, 0, 0) for a plain process."""
    return int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))


def launched_by_torchrun() -> bool:
    """Whether torchrun started this process (it names the run in the environment), even as a world of one."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def init_distributed(device: torch.device, timeout_minutes: float) -> None:
    """Join torchrun's process group: NCCL on GPUs, gloo on CPUs. Collectives time out rather than hang
    when a peer is lost."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if device.type == "cuda":  # bound to its GPU from the start: NCCL then never guesses the device
        dist.init_process_group("nccl", timeout=timedelta(minutes=timeout_minutes), device_id=device)
    else:
        dist.init_process_group("gloo", timeout=timedelta(minutes=timeout_minutes))


def build_mesh(dims: ParallelDims, device: torch.device):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dims.pp, dims.dp, dims.tp), mesh_dim_names=("pp", "dp", "tp"))


@contextmanager
def distributed_session(dims: ParallelDims, device: torch.device, timeout_minutes: float) -> Iterator:
    """The process group and mesh of `dims` for the block (no mesh for one process). A process torchrun
    started joins its process group even alone, as Megatron's do, so one GPU under torchrun starts NCCL as
    eight do. Leaving, a clean exit after success and an immediate one after a failure (`shutdown`)."""
    try:
        mesh = None
        if dims.distributed or launched_by_torchrun():
            init_distributed(device, timeout_minutes)
        if dims.distributed:
            mesh = build_mesh(dims, device)
        yield mesh
    except BaseException:
        shutdown(clean=False)
        raise
    shutdown()


def shutdown(clean: bool = True) -> None:
    """Leave the process group: after success with a barrier first (gloo can abort at exit without one); after
    a failure without, since the other ranks may be waiting on this one and will never reach it."""
    import torch.distributed as dist

    if dist.is_initialized():
        if clean:
            dist.barrier()
        dist.destroy_process_group()


def torchrun(n: int, program: list[str]) -> None:
    """Run `python PROGRAM...` as n processes on this machine under torchrun (standalone rendezvous)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", *program]
    code = subprocess.run(cmd).returncode
    if code:
        raise RunFailed(f"torchrun with {n} processes ended with exit status {code} (see the errors above)")
