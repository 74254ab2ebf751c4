"""Tensor parallelism (Megatron's --tensor-model-parallel-size) and sequence parallelism (--sequence-parallel)
as DTensor plans over the "tp" mesh dimension.

Each block's two matrix pairs are split so one block costs two all-reduces (Shoeybi et al. 2019):
- attention: the QKV projection column-wise, i.e. by heads (its rows are grouped per query group, so a
  contiguous block of rows is whole groups), attention runs on the local heads, the output projection
  row-wise. With fewer key/value groups than ranks (TP > G) the QKV matrix is replicated instead and each
  rank computes its own query heads and its group's keys and values (GroupReplicatedQKV);
- MLP: fc1 (and the SwiGLU gate) column-wise, fc2 row-wise;
- the token embedding row-wise (by vocabulary); the output layer uses the same vocabulary slice, and the
  loss is computed on it without gathering the logits (loss.language_model_loss, vocabulary-parallel).

Sequence parallelism (Korthikanti et al. 2022) also splits the work between those regions (norms, dropout,
residual adds) along the sequence: activations there are [B, T / TP, h], the all-reduces become
reduce-scatter + all-gather pairs, and the norms' weights are replicated DTensors whose gradients are summed
over the group.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def apply_tensor_parallel(model: nn.Module, tp_mesh, sequence_parallel: bool) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

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
    tp, groups = tp_mesh.size(), model.config.kv_heads
    for block in model.blocks.values():
        if tp > groups:
            block.attn.qkv = GroupReplicatedQKV(block.attn.qkv, tp_mesh, model.config)
            block.attn.queries_per_group = model.config.num_attention_heads // tp
        block_plan = {
            "attn.proj": RowwiseParallel(output_layouts=between),
            "mlp.fc1": ColwiseParallel(),
            "mlp.fc2": RowwiseParallel(output_layouts=between),
        }
        if tp <= groups:
            block_plan["attn.qkv"] = ColwiseParallel()
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
        for sublayer in (block.attn, block.mlp):  # before the plan's own input hook (the all-gather)
            sublayer.register_forward_pre_hook(in_compute_dtype, prepend=True)


def in_compute_dtype(module: nn.Module, args: tuple):
    """A sublayer's input in autocast's dtype (bf16, fp16), as Megatron's 16-bit activations are: sequence
    parallelism's all-gather, and the reduction of the input's gradient in the backward pass, then move half
    the bytes of fp32. Its matrix products would cast it anyway, so the forward values are unchanged."""
    x = args[0]
    device = x.device.type
    if not torch.is_autocast_enabled(device) or x.dtype == torch.get_autocast_dtype(device):
        return None
    return (x.to(torch.get_autocast_dtype(device)), *args[1:])


class GroupReplicatedQKV(nn.Module):
    """The QKV projection when the tensor-parallel ranks outnumber the key/value groups (TP = k x G): the
    matrix is a replicated DTensor, and rank r computes only its heads / TP query heads and the keys and
    values of their group, g = r // k, from the matrix's rows [G, (queries, k, v), head_dim]. Each rank's
    query heads are then heads [r x heads / TP, (r + 1) x heads / TP), the slice of the output projection
    that RowwiseParallel gives it. The gradients of the matrix and of the input are partial sums (a rank
    sees only its heads) and are all-reduced over the group in the backward pass; a key/value row's sum
    gathers the k ranks that share it."""

    def __init__(self, linear: nn.Linear, tp_mesh, config):
        from torch.distributed.tensor import Replicate, distribute_tensor

        super().__init__()
        self.group = tp_mesh.get_group()
        self.weight = nn.Parameter(distribute_tensor(linear.weight.data, tp_mesh, [Replicate()]))
        self.bias = None if linear.bias is None else nn.Parameter(distribute_tensor(linear.bias.data, tp_mesh, [Replicate()]))
        tp, rank = tp_mesh.size(), tp_mesh.get_local_rank()
        per_group, hd = config.num_attention_heads // config.kv_heads, config.head_dim
        queries = config.num_attention_heads // tp  # this rank's query heads, all in one group
        group, part = divmod(rank, tp // config.kv_heads)
        first = group * (per_group + 2) * hd  # the group's first row
        # Two runs of rows: this rank's queries, then the group's keys and values.
        self.runs = ((first + part * queries * hd, first + (part + 1) * queries * hd),
                     (first + per_group * hd, first + (per_group + 2) * hd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor import DTensor

        if isinstance(x, DTensor):  # sequence parallelism gathered the input; a replicated DTensor
            x = x.to_local()
        weight = self.rows_of(SumGradient.apply(self.weight.to_local(), self.group))
        bias = None if self.bias is None else self.rows_of(SumGradient.apply(self.bias.to_local(), self.group))
        return F.linear(SumGradient.apply(x, self.group), weight, bias)

    def rows_of(self, t: torch.Tensor) -> torch.Tensor:
        return torch.cat([t[start:end] for start, end in self.runs])


class SumGradient(torch.autograd.Function):
    """Identity in the forward pass; the backward pass sums the gradient over the process group (Megatron's
    copy-to-tensor-parallel-region). The forward returns a copy where Megatron returns the input itself:
    the input may be a view (a DTensor's to_local), and a custom Function may not return a view that is
    modified in place, which dynamo enforces under --compile."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        torch.distributed.all_reduce(grad, group=ctx.group)
        return grad, None
