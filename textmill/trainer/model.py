"""The GPT model: GPT-2 by default, LLaMA-style blocks behind flags. One file, the math visible.

GPT-2: learned position embeddings, pre-LayerNorm blocks, GELU MLP (4h), tied input/output embeddings,
biases everywhere. LLaMA-style (as Megatron-LLaMA offers): rotary position embeddings, RMSNorm, SwiGLU MLP,
no biases, untied output layer. GPT-NeoX: rotary embeddings on part of each head, and attention and MLP
reading the same input with one residual add (the parallel residual). GPT-J: the same with one norm for
both branches, rotary pairs of neighbouring dimensions, no attention biases and a biased output layer.
Attention goes through `scaled_dot_product_attention` (flash or memory-efficient kernels on GPU).

The query/key/value projection is one matrix whose rows are grouped per query group as
[groups, (queries of the group, k, v), head_dim]: Megatron's layout (since checkpoint version 2.0), and the
one where splitting the rows into contiguous blocks gives each tensor-parallel rank whole groups. Without
grouped-query attention every head is its own group, [heads, (q, k, v), head_dim], a [3h, h] matrix; with
G groups the keys and values have G heads, each read by heads / G queries.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, noop_context_fn

from textmill.trainer.gpt_config import GPTConfig


def make_norm(config: GPTConfig) -> nn.Module:
    if config.normalization == "rmsnorm":
        return nn.RMSNorm(config.hidden_size, eps=config.norm_epsilon)
    return nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon, bias=config.bias)


def rope_tables(config: GPTConfig, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position x frequency, [positions, rotary_dim / 2], in fp32."""
    dim = config.rotary_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
    if config.rope_scaling == "llama3":
        inv_freq = llama3_scaled(inv_freq, config)
    angles = torch.outer(torch.arange(config.max_position_embeddings, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def llama3_scaled(inv_freq: torch.Tensor, config: GPTConfig) -> torch.Tensor:
    """LLaMA 3.1's rope scaling: wavelengths longer than original / low_freq_factor are stretched by the
    factor, those shorter than original / high_freq_factor kept, and those between blended linearly in
    original / wavelength."""
    wavelength = 2 * math.pi / inv_freq
    original, low, high = config.rope_original_max_positions, config.rope_low_freq_factor, config.rope_high_freq_factor
    blend = ((original / wavelength - low) / (high - low)).clamp(0, 1)
    return (1 - blend) * inv_freq / config.rope_scaling_factor + blend * inv_freq


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False) -> torch.Tensor:
    """Rotate pairs of the leading 2 * cos.shape[-1] dimensions of x [B, heads, T, head_dim] by their
    position's angle; the other dimensions pass unturned (partial rotary, GPT-NeoX and GPT-J). A pair is
    dimension i with i + half (LLaMA, GPT-NeoX), or with `interleaved` dimensions 2i and 2i + 1 (GPT-J)."""
    half = cos.shape[-1]
    turned = x[..., : 2 * half].float()
    x1, x2 = (turned[..., 0::2], turned[..., 1::2]) if interleaved else (turned[..., :half], turned[..., half:])
    pairs = (x1 * cos - x2 * sin, x2 * cos + x1 * sin)
    rotated = (torch.stack(pairs, dim=-1).flatten(-2) if interleaved else torch.cat(pairs, dim=-1)).type_as(x)
    return rotated if 2 * half == x.shape[-1] else torch.cat([rotated, x[..., 2 * half :]], dim=-1)


def stream_for(stream, drawing: bool):
    """The random stream dropout draws from: `stream()` when set and dropout is drawing, else the default."""
    return stream() if stream is not None and drawing else contextlib.nullcontext()


class Attention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.qkv = nn.Linear(config.hidden_size, (config.num_attention_heads + 2 * config.kv_heads) * config.head_dim,
                             bias=config.attention_bias)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        # Query heads per key/value head in what qkv returns (fewer when tensor parallelism splits a group).
        self.queries_per_group = config.num_attention_heads // config.kv_heads

        self.recompute = False  # selective recomputation: keep only q, k, v for the backward pass
        # Under tensor parallelism, a context drawing from this rank's own random stream: each rank's heads
        # get masks of their own (parallel/rng.py). None: the default stream.
        self.dropout_stream = None

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None,
                cache: KVCache | None = None, layer: str = "") -> torch.Tensor:
        qkv = self.qkv(x)
        # [B, T, groups_here, queries + 2, head_dim]: groups_here is every query group, or this rank's share
        # under tensor parallelism; T is the whole sequence even when x was a sequence-parallel shard.
        B, T = qkv.shape[:2]
        queries = self.queries_per_group
        qkv = qkv.view(B, T, -1, queries + 2, self.config.head_dim)
        q = qkv[:, :, :, :queries].flatten(2, 3).transpose(1, 2)  # [B, heads, T, head_dim], group by group
        k, v = (qkv[:, :, :, queries + i].transpose(1, 2) for i in range(2))  # [B, groups, T, head_dim]
        start = cache.length if cache is not None else 0  # position of x's first token
        if rope is not None:
            cos, sin = rope[0][start : start + T], rope[1][start : start + T]
            interleaved = self.config.rotary_interleaved
            q, k = apply_rope(q, cos, sin, interleaved), apply_rope(k, cos, sin, interleaved)
        if cache is not None:
            k, v = cache.extend(layer, k, v)
        # The stream is entered outside the checkpoint, which then stashes and replays its state.
        with stream_for(self.dropout_stream, self.training and self.config.attention_dropout > 0):
            if self.recompute and self.training:
                y = checkpoint(self.core, q, k, v, use_reentrant=False)
            else:
                y = self.core(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of queries at the last q.shape[2] of k.shape[2] positions (all of them, except
        when a key/value cache holds the earlier ones)."""
        dropout = self.config.attention_dropout if self.training else 0.0
        if k.shape[1] != q.shape[1]:  # grouped-query attention: each key/value head serves its group's queries
            k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
        T, S = q.shape[2], k.shape[2]
        if T == S:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        # The causal mask of the last T rows: SDPA's is_causal aligns the diagonal top-left, which is only
        # right for T == S. One new token (T == 1) sees every key and needs no mask.
        mask = None if T == 1 else torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


class KVCache:
    """The keys and values of every position a model has read so far, per layer, for generation: each new
    token then costs the forward pass of one position instead of the whole prefix's.

    Buffers are made on first use at [batch, key/value heads, max_length, head_dim] (the query groups, with
    grouped-query attention) and filled left to right;
    GPT.forward advances `length` after each call."""

    def __init__(self, max_length: int):
        self.max_length, self.length = max_length, 0
        self.layers: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def extend(self, layer: str, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, heads, T, head_dim] at the next T positions; return the keys and values of every
        position up to and including them."""
        end = self.length + k.shape[2]
        if end > self.max_length:
            raise ValueError(f"the cache holds {self.max_length} positions; {end} were asked for")
        if layer not in self.layers:
            shape = (k.shape[0], k.shape[1], self.max_length, k.shape[3])
            self.layers[layer] = (k.new_empty(shape), v.new_empty(shape))
        keys, values = self.layers[layer]
        keys[:, :, self.length : end] = k
        values[:, :, self.length : end] = v
        return keys[:, :, :end], values[:, :, :end]

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep the cached rows `rows` (indices into the batch, repeats allowed), in that order: beam search
        continues some sequences twice and drops others."""
        self.layers = {name: (k.index_select(0, rows), v.index_select(0, rows)) for name, (k, v) in self.layers.items()}


class MLP(nn.Module):
    """fc2(act(fc1(x))); SwiGLU: fc2(silu(gate(x)) * fc1(x)). The gate is its own matrix rather than half
    of a fused one, so a column split for tensor parallelism gives each rank matching gate and up halves."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.fc1 = nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=config.bias)
        self.gate = nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=config.bias) if config.activation == "swiglu" else None
        self.fc2 = nn.Linear(config.ffn_hidden_size, config.hidden_size, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            h = F.silu(self.gate(x)) * self.fc1(x)
        else:
            h = F.gelu(self.fc1(x), approximate="tanh" if self.config.activation == "gelu_tanh" else "none")
        return self.fc2(h)


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.norm1, self.attn = make_norm(config), Attention(config)
        self.norm2 = None if config.shared_input_norm else make_norm(config)  # GPT-J: the MLP reads norm1's output
        self.mlp = MLP(config)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.dropout_stream = None  # under sequence parallelism, this rank's stream (its slice of the sequence)
        self.parallel = config.parallel_residual

    def forward(self, x: torch.Tensor, rope=None, cache: KVCache | None = None, layer: str = "") -> torch.Tensor:
        # cache and layer by keyword: tensor parallelism's input plans cover the positional inputs
        normed = self.norm1(x)
        attended = self.drop(self.attn(normed, rope, cache=cache, layer=layer))
        if self.parallel:  # both branches read the block's input (GPT-NeoX, GPT-J)
            return x + attended + self.drop(self.mlp(normed if self.norm2 is None else self.norm2(x)))
        x = x + attended
        return x + self.drop(self.mlp(self.norm2(x)))

    def drop(self, x: torch.Tensor) -> torch.Tensor:
        with stream_for(self.dropout_stream, self.training and self.dropout.p > 0):
            return self.dropout(x)


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.wpe = nn.Embedding(config.max_position_embeddings, config.hidden_size) if config.position_embedding == "learned" else None
        self.drop = nn.Dropout(config.hidden_dropout)
        # Keyed by layer number, so a pipeline stage holding layers 6-11 still names them blocks.6...blocks.11.
        self.blocks = nn.ModuleDict({str(i): Block(config) for i in range(config.num_layers)})
        self.norm_f = make_norm(config)
        self.lm_head = None if config.tie_embeddings else nn.Linear(config.hidden_size, config.vocab_size,
                                                                     bias=config.output_bias)
        if config.position_embedding == "rope":
            cos, sin = rope_tables(config)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.embeds = True  # False in pipeline stages after the first (see parallel/pipeline_parallel.py)
        self.recompute_blocks = False  # full recomputation: keep only each block's input for backward
        self.dropout_stream = None  # under sequence parallelism, this rank's stream (embedding dropout)
        self.recompute_context = noop_context_fn  # what a recomputed block draws from (parallel/rng.py)
        self.reset_parameters()

    def set_recompute(self, granularity: str | None) -> None:
        """Activation checkpointing, as Megatron's --recompute-granularity: "full" recomputes every block in
        the backward pass, "selective" only the attention core (the part whose activations grow with T^2)."""
        self.recompute_blocks = granularity == "full"
        for block in self.blocks.values():
            block.attn.recompute = granularity == "selective"

    def reset_parameters(self) -> None:
        """Megatron's init: N(0, 0.02) weights, zero biases, unit norms; the two projections that write
        into the residual stream scaled by 1/sqrt(2 * layers)."""
        std = self.config.init_std
        for name, p in self.named_parameters():
            if p.ndim < 2:
                nn.init.ones_(p) if "norm" in name else nn.init.zeros_(p)
            elif name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * self.config.num_layers))
            else:
                nn.init.normal_(p, 0.0, std)

    def output_weight(self) -> torch.Tensor:
        return self.wte.weight if self.lm_head is None else self.lm_head.weight

    def output_bias(self) -> torch.Tensor | None:
        return None if self.lm_head is None else self.lm_head.bias

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor | None = None,
                loss_mask: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        """Logits [B, T, padded vocab] for token ids [B, T]; with labels [B, T], the mean cross-entropy
        instead (computed without materialising the logits: see LanguageModelLoss). With a key/value
        cache, `tokens` continue the sequence the cache holds, and the cache grows by T positions.

        A pipeline stage holds only some of the parts: after the first stage `tokens` are the previous
        stage's hidden states, and a stage before the last returns its hidden states."""
        x = self.embed(tokens, cache.length if cache is not None else 0) if self.embeds else tokens
        rope = (self.rope_cos, self.rope_sin) if self.config.position_embedding == "rope" else None
        for name, block in self.blocks.items():
            if self.recompute_blocks and self.training:
                x = checkpoint(block, x, rope, use_reentrant=False, context_fn=self.recompute_context)
            else:
                x = block(x, rope, cache=cache, layer=name)
        if cache is not None:
            cache.length += tokens.shape[1]
        if self.norm_f is None:
            return x
        x = self.norm_f(x)
        if labels is not None:
            return language_model_loss(x, self.output_weight(), labels, loss_mask, self.output_bias())
        return output_logits(x, self.output_weight(), self.output_bias())

    def embed(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        end = start + tokens.shape[1]
        if end > self.config.max_position_embeddings:
            raise ValueError(f"sequence of {end} tokens is longer than the {self.config.max_position_embeddings} positions")
        x = self.wte(tokens)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(start, end, device=tokens.device))
        with stream_for(self.dropout_stream, self.training and self.drop.p > 0):
            return self.drop(x)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


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


def training_flops(config: GPTConfig, batch: int, seq_len: int) -> float:
    """Model FLOPs of one training step on `batch` sequences: 3 x the forward pass (backward = 2 x forward),
    no recomputation counted, matrix multiplications only (2 FLOPs per multiply-add):
        forward = L * (2 B s h (2h + kv) + 4 B s^2 h + 2 B s h f m) + 2 B s h V
    (Q, K, V and output projections, kv = the key and value widths, 2h without grouped-query attention; attention scores and their weighted sum; the MLP with f = ffn size and
    m = 2 matrices, 3 for SwiGLU; the logits). For GPT-2 (f = 4h) this is Megatron's
    72 B s L h^2 (1 + s / (6h) + V / (12 L h)) (Narayanan et al. 2021, without the recomputation pass)."""
    B, s, L, h, V, f = batch, seq_len, config.num_layers, config.hidden_size, config.vocab_size, config.ffn_hidden_size
    m = 3 if config.activation == "swiglu" else 2
    kv = 2 * config.kv_heads * config.head_dim  # key and value widths (2h without grouped-query attention)
    forward = L * (2 * B * s * h * (2 * h + kv) + 4 * B * s * s * h + 2 * B * s * h * f * m) + 2 * B * s * h * V
    return 3.0 * forward
