"""Tensor parallelism (Megatron's --tensor-model-parallel-size) and sequence parallelism (--sequence-parallel)
as DTensor plans over the "tp" mesh dimension.

Each block's two matrix pairs are split so one block costs two all-reduces (Shoeybi et al. 2019):
- attention: the QKV projection column-wise, i.e. by heads (its rows are grouped per head, so a contiguous
  block of rows is whole heads), attention runs on the local heads, the output projection row-wise;
- MLP: fc1 (and the SwiGLU gate) column-wise, fc2 row-wise;
- the token embedding row-wise (by vocabulary); the output layer uses the same vocabulary slice, and the
  loss is computed on it without gathering the logits (model.language_model_loss, vocabulary-parallel).

Sequence parallelism (Korthikanti et al. 2022) also splits the work between those regions (norms, dropout,
residual adds) along the sequence: activations there are [B, T / TP, h], the all-reduces become
reduce-scatter + all-gather pairs, and the norms' weights are replicated DTensors whose gradients are summed
over the group.
"""

from __future__ import annotations

from torch import nn


def apply_tensor_parallel(model: nn.Module, tp_mesh, sequence_parallel: bool) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    # Activations outside the split regions: sequence-sharded with SP, whole (replicated) without.
    between = Shard(1) if sequence_parallel else Replicate()
    plan = {"wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=between)}
    if sequence_parallel:
        # Positions come in as arange(T) [T], so their sequence dimension is 0 (docs/REFERENCE.md section 8).
        if model.wpe is not None:
            plan["wpe"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0))
        plan["norm_f"] = SequenceParallel()
    if model.lm_head is not None:
        plan["lm_head"] = ColwiseParallel()  # only its weight (and bias) is used: a vocabulary slice, like wte's
    parallelize_module(model, tp_mesh, plan)
    for block in model.blocks.values():
        block_plan = {
            "attn.qkv": ColwiseParallel(),
            "attn.proj": RowwiseParallel(output_layouts=between),
            "mlp.fc1": ColwiseParallel(),
            "mlp.fc2": RowwiseParallel(output_layouts=between),
        }
        if block.mlp.gate is not None:
            block_plan["mlp.gate"] = ColwiseParallel()
        if sequence_parallel:
            # Gather the sequence once per sublayer (not once per matrix that reads it); the gradient
            # coming back is reduce-scattered to the sequence shards.
            block_plan |= {
                "norm1": SequenceParallel(),
                "attn": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            }
            if block.norm2 is not None:  # GPT-J's blocks have one norm
                block_plan["norm2"] = SequenceParallel()
        parallelize_module(block, tp_mesh, block_plan)
