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

from torch import nn


def apply_data_parallel(model: nn.Module, dp_mesh, sharded: bool, overlap: bool = True) -> nn.Module:
    if sharded:
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks.values():
            # Keep gathered parameters from forward to backward: one all-gather per block per micro-batch.
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=False)
        fully_shard(model, mesh=dp_mesh, reshard_after_forward=False)
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
