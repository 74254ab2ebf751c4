"""Data parallelism: every data-parallel rank holds the model, takes its share of each global batch, and
gradients are averaged over the ranks.

- Default: DistributedDataParallel. Gradients are all-reduced in buckets while the backward pass of the
  last micro-batch is still running (the communication overlaps the computation, as Megatron-LLaMA's
  overlapped gradient reduce does); earlier micro-batches only accumulate locally. Without overlap
  (--no-overlap-grad-reduce) one bucket holds every gradient, reduced once the backward pass is done.
- --use-distributed-optimizer: FSDP2 (`fully_shard`) per transformer block. Parameters, gradients and
  AdamW state are sharded over the data-parallel ranks (1/DP of the optimizer state each, the point of
  Megatron's distributed optimizer); parameters are gathered for forward and backward and gradients
  reduce-scattered, again overlapping the backward pass.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn


def apply_data_parallel(model: nn.Module, dp_mesh, sharded: bool, overlap: bool = True,
                        compute_dtype: torch.dtype | None = None) -> nn.Module:
    """`compute_dtype` (bf16 or fp16 autocast): FSDP2 gathers parameters in it, as autocast would cast them
    for the products anyway (half the bytes of fp32), and reduces gradients in fp32."""
    if sharded:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32 if compute_dtype else None)
        for block in model.blocks.values():
            # Keep gathered parameters from forward to backward: one all-gather per block per micro-batch.
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=False, mp_policy=policy)
        fully_shard(model, mesh=dp_mesh, reshard_after_forward=False, mp_policy=policy)
        return model
    from torch.nn.parallel import DistributedDataParallel

    # Without overlap, one bucket as large as all gradients: its all-reduce starts when the backward pass ends.
    bucket_mb = 25 if overlap else max(1, sum(p.numel() * p.element_size() for p in model.parameters()) >> 20) + 1
    # Buffers are not broadcast each forward: the only ones (RoPE tables) are computed alike on every rank.
    # Gradients live in the buckets (no copy between them and .grad).
    return DistributedDataParallel(model, process_group=dp_mesh.get_group(), bucket_cap_mb=bucket_mb,
                                   broadcast_buffers=False, gradient_as_bucket_view=True)


def gradient_sync(model: nn.Module, enabled: bool):
    """A context in which backward passes reduce gradients over data-parallel ranks only if `enabled`
    (the last micro-batch of a step); the others just accumulate."""
    if hasattr(model, "no_sync"):  # DDP
        return contextlib.nullcontext() if enabled else model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(enabled)
    return contextlib.nullcontext()
