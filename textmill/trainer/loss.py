"""The language model's loss and logits: cross-entropy against the output embedding without holding the
logits (LanguageModelLoss), the vocabulary-parallel form of both under tensor parallelism."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class LanguageModelLoss(torch.autograd.Function):
    """Mean cross-entropy of the logits hidden @ weight.T (+ bias) against labels, without ever holding all logits.

    The logits of a GPT-2 batch are the largest tensor of a step (8 x 1024 x 50304 fp32 = 1.6 GB, and
    as much again for their gradient). Rows go through in chunks of about LOSS_CHUNK_BYTES of logits;
    since the loss is a scalar, each chunk's gradients are known as soon as its softmax is:
        d loss / d logits = (softmax(logits) - onehot(label)) * mask / sum(mask)
    so the forward pass computes d hidden = P @ weight, d weight = P.T @ hidden (and d bias = the column sums
    of P) right away and the backward pass only scales them. Same FLOPs as the plain way, a fraction of the memory traffic.

    Under tensor parallelism (`group` given) the weight is this rank's slice of the vocabulary, rows
    [vocab_start, vocab_start + len(weight)), and hidden is whole on every rank. The softmax is made global
    as Megatron's vocab-parallel cross-entropy makes it: all-reduce the row maxima, then the sums of
    exponentials together with the target's logit (held by one rank, 0 elsewhere); d hidden is summed
    over the group. No rank ever holds another rank's logits."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, loss_mask, group=None, vocab_start=0, grad_enabled=True):
        device = hidden.device.type
        # Matrix products in the autocast dtype when autocast is on (as F.linear would be), softmax in fp32.
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
        vocab = weight.shape[0]
        rows = max(1, LOSS_CHUNK_BYTES // (4 * vocab))
        # Inside forward grad mode is always off: whether the caller's is (evaluation runs under no_grad
        # with parameters that require gradients) comes in as grad_enabled.
        want_grads = grad_enabled and any(ctx.needs_input_grad[:3])
        mask = loss_mask.float()
        denominator = mask.sum()
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        with torch.autocast(device, enabled=False):
            w = weight.to(dtype)
            grad_hidden = torch.empty_like(hidden) if want_grads else None
            grad_weight = None
            b = None if bias is None else bias.float()
            grad_bias = None if bias is None else torch.zeros_like(b)
            for start in range(0, hidden.shape[0], rows):
                h, y, m = hidden[start : start + rows].to(dtype), labels[start : start + rows], mask[start : start + rows]
                logits = (h @ w.t()).float()
                if b is not None:
                    logits += b
                local_y = y - vocab_start
                here = (local_y >= 0) & (local_y < vocab)  # the rows whose target is in this vocabulary slice
                local_y = local_y.clamp(0, vocab - 1)
                row_max = logits.max(dim=-1).values
                if group is not None:
                    torch.distributed.all_reduce(row_max, torch.distributed.ReduceOp.MAX, group=group)
                logits.sub_(row_max[:, None])
                sums = torch.stack([logits.exp().sum(dim=-1), logits.gather(1, local_y[:, None])[:, 0] * here])
                if group is not None:
                    torch.distributed.all_reduce(sums, group=group)
                log_z = sums[0].log()  # log-sum-exp, less the row maximum (which cancels)
                total += ((log_z - sums[1]) * m).sum()
                if want_grads:
                    probs = logits.sub_(log_z[:, None]).exp_()
                    probs.scatter_add_(1, local_y[:, None], -here[:, None].to(probs.dtype))  # minus the one-hot target
                    # Masked, not yet divided by the token count: divided first, most entries of a
                    # large batch fall below fp16's smallest number when cast (35% error against float64
                    # instead of 0.01%). The products are divided in fp32, after.
                    probs.mul_(m[:, None])
                    grad_hidden[start : start + rows] = (probs.to(dtype) @ w).float().div_(denominator)
                    # The weight's gradient as Megatron makes it: the product in the compute dtype (16-bit
                    # operands, fp32 accumulation inside the kernel), added up in fp32.
                    chunk_grad = probs.t() @ h if dtype == torch.float32 else (probs.to(dtype).t() @ h).float()
                    grad_weight = chunk_grad if grad_weight is None else grad_weight.add_(chunk_grad)
                    if grad_bias is not None:
                        grad_bias += probs.sum(dim=0)
        if want_grads:
            grad_weight.div_(denominator)
            if grad_bias is not None:
                grad_bias.div_(denominator)
            if group is not None:
                torch.distributed.all_reduce(grad_hidden, group=group)
            ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype),
                                  None if grad_bias is None else grad_bias.to(bias.dtype))
        return total / denominator

    @staticmethod
    def backward(ctx, grad_loss):
        # Scaled in place: these buffers are this step's alone (so the graph can be run backward once).
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        grad_bias = None if grad_bias is None else grad_bias.mul_(grad_loss)
        return grad_hidden.mul_(grad_loss), grad_weight.mul_(grad_loss), grad_bias, None, None, None, None, None


LOSS_CHUNK_BYTES = 1 << 27


def vocabulary_parallel(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """For an output layer sharded by vocabulary over a tensor-parallel group (DTensors): the whole hidden
    states as a plain tensor (gathered along the sequence under sequence parallelism), this rank's weight
    and bias slices, the group and the slice's first vocabulary row. Plain tensors pass through with no group."""
    from torch.distributed.tensor import DTensor

    if not isinstance(weight, DTensor):
        return hidden, weight, bias, None, 0
    if isinstance(hidden, DTensor):
        hidden = hidden.full_tensor()
    mesh = weight.device_mesh
    local = weight.to_local()
    return hidden, local, None if bias is None else bias.to_local(), mesh.get_group(), mesh.get_local_rank() * local.shape[0]


def language_model_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                        loss_mask: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy (over unmasked positions) of next-token logits hidden @ weight.T + bias, in fp32.
    hidden [B, T, h], weight [V, h], labels [B, T], bias [V] or None."""
    hidden, weight, bias, group, vocab_start = vocabulary_parallel(hidden, weight, bias)
    hidden, labels = hidden.flatten(0, 1), labels.flatten()
    mask = torch.ones_like(labels, dtype=torch.float32) if loss_mask is None else loss_mask.flatten()
    return LanguageModelLoss.apply(hidden, weight, bias, labels, mask, group, vocab_start, torch.is_grad_enabled())


def output_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """hidden @ weight.T + bias, gathered over the vocabulary slices under tensor parallelism."""
    hidden, weight, bias, group, _ = vocabulary_parallel(hidden, weight, bias)
    logits = F.linear(hidden, weight, bias)
    if group is not None:
        parts = [torch.empty_like(logits) for _ in range(torch.distributed.get_world_size(group))]
        torch.distributed.all_gather(parts, logits.contiguous(), group=group)
        logits = torch.cat(parts, dim=-1)
    return logits
