"""Pipeline parallelism (Megatron's --pipeline-model-parallel-size, and the interleaved schedule with
--num-layers-per-virtual-pipeline-stage) on torch.distributed.pipelining.

The layers are cut into `stages` equal runs; stage s lives on pipeline rank s % PP, so with virtual stages
each rank holds several non-adjacent runs (the interleaved schedule of Narayanan et al. 2021, which shrinks
the pipeline bubble by that factor). A stage is a copy of the whole GPT with the parts it does not hold
removed, so its parameters keep their global names (blocks.7.attn.qkv.weight) and checkpoints stay
independent of the layout.

Tied input/output embeddings: the first stage embeds and the last one computes the logits with the same
matrix, so both hold a copy, as in Megatron; their gradients are summed over the two ranks after every
backward pass and the two copies stay identical.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch import nn


def split_stages(model: nn.Module, pp_rank: int, pp: int, virtual: int,
                 transfer_dtype: torch.dtype | None = None) -> list[tuple[int, nn.Module]]:
    """(stage index, stage model) for each of this rank's stages; `virtual` stages per rank.

    `transfer_dtype` (autocast's bf16 or fp16): the hidden states go from stage to stage in it, as Megatron's
    16-bit activations do (half the bytes of fp32), and the next stage carries the residual stream on in
    fp32: the one difference from a single process is that rounding at each stage boundary."""
    stages = pp * virtual
    per_stage = model.config.num_layers // stages
    chunks = []
    for s in range(pp_rank, stages, pp):
        chunk = copy.deepcopy(model)
        first, last = s == 0, s == stages - 1
        keep = {str(i) for i in range(s * per_stage, (s + 1) * per_stage)}
        for name in [n for n in chunk.blocks if n not in keep]:
            del chunk.blocks[name]
        if transfer_dtype is not None and not first:
            chunk.register_forward_pre_hook(lambda module, args: (args[0].float(), *args[1:]))
        if transfer_dtype is not None and not last:
            chunk.register_forward_hook(lambda module, args, hidden: hidden.to(transfer_dtype))
        if not first:
            chunk.embeds = False
            chunk.wpe = None
            if not (last and chunk.lm_head is None):  # the last stage keeps a tied embedding as its output layer
                chunk.wte = None
        if not last:
            chunk.norm_f = None
            chunk.lm_head = None
        else:
            # The schedule concatenates the last stage's outputs over micro-batches, so give the loss a dimension.
            chunk.register_forward_hook(lambda module, args, loss: loss.reshape(1))
        chunks.append((s, chunk))
    return chunks


def build_schedule(chunks: list[tuple[int, nn.Module]], wrapped: list[nn.Module], stages: int, pp_mesh,
                   device: torch.device, micro_batches: int, micro_batch: int, seq_len: int, sequence_shards: int,
                   transfer_dtype: torch.dtype | None = None):
    """1F1B for one stage per rank, interleaved 1F1B for several. The last stage's forward returns the
    micro-batch's loss (the model computes it from the labels it is given), which the schedule backpropagates;
    the schedule divides the accumulated gradients by the number of micro-batches.

    The shapes passed between stages are given up front (token ids into the first stage, hidden states
    of this rank's sequence shard between stages, the loss out of the last), so the schedule need not infer
    them with a trial forward pass, which would run the tensor-parallel collectives out of step. Hidden
    states travel in `transfer_dtype` when given (see split_stages), else in fp32."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

    group = pp_mesh.get_group()
    hidden = torch.empty(micro_batch, seq_len // sequence_shards, chunks[0][1].config.hidden_size, device="meta",
                         dtype=transfer_dtype or torch.float32, requires_grad=True)
    tokens = torch.empty(micro_batch, seq_len, dtype=torch.long, device="meta")
    loss = torch.empty(1, device="meta")
    pipeline = []
    for (s, _), module in zip(chunks, wrapped, strict=True):
        first, last = s == 0, s == stages - 1
        pipeline.append(PipelineStage(module, s, stages, device, group=group,
                                      input_args=tokens if first else hidden, output_args=loss if last else hidden,
                                      input_grads=None if first else hidden, output_grads=None if last else hidden))
    if len(pipeline) == 1:
        return Schedule1F1B(pipeline[0], micro_batches, loss_fn=last_stage_loss)
    return ScheduleInterleaved1F1B(pipeline, micro_batches, loss_fn=last_stage_loss)


def last_stage_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return output[0]  # the last stage already returns the loss of its micro-batch


def embedding_group(mesh) -> dist.ProcessGroup | None:
    """The group of the first and last pipeline ranks at this rank's (data, tensor) coordinate, the ranks
    holding the two copies of a tied embedding. Every rank must call this (group creation is collective)."""
    ranks = mesh.mesh  # [pp, dp, tp] global ranks
    mine = None
    for d in range(ranks.shape[1]):
        for t in range(ranks.shape[2]):
            pair = sorted({int(ranks[0, d, t]), int(ranks[-1, d, t])})
            group = dist.new_group(pair)
            if dist.get_rank() in pair:
                mine = group
    return mine


def sync_tied_embedding(chunks: list[tuple[int, nn.Module]], stages: int, group) -> None:
    """Sum the gradient of the two copies of a tied embedding (first and last stage)."""
    from torch.distributed.tensor import DTensor

    for s, chunk in chunks:
        if chunk.lm_head is None and chunk.wte is not None and (s == 0 or s == stages - 1) and group is not None:
            weight = chunk.wte.weight
            if isinstance(weight, DTensor):
                # The embedding's backward leaves a replicated gradient, the output layer's a vocabulary-sharded
                # one: bring both to the weight's own layout so the two ranks reduce tensors of one shape.
                weight.grad = weight.grad.redistribute(weight.device_mesh, weight.placements)
                dist.all_reduce(weight.grad.to_local(), group=group)
            else:
                dist.all_reduce(weight.grad, group=group)
