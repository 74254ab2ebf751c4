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
import zlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, noop_context_fn

from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.loss import language_model_loss, output_logits


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


def parameter_generator(seed: int, name: str) -> torch.Generator:
    """The CPU generator a parameter's initial values are drawn from: its own, from the seed and its name."""
    # The CPU generator (mt19937) keeps 32 bits of its seed, so both go through one 32-bit hash.
    return torch.Generator().manual_seed(zlib.crc32(f"{seed}/{name}".encode()))


@torch.no_grad()
def copy_whole(param: torch.Tensor, value: torch.Tensor) -> None:
    """Copy a whole tensor into `param`, or into this rank's shard of it when `param` is a DTensor."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(param, DTensor):
        # Every rank holds the same whole value; rank 0's is scattered (torch 2.6 has no way to say "keep your own").
        value = distribute_tensor(value, param.device_mesh, param.placements).to_local()
        param = param.to_local()
    param.copy_(value)


def stream_for(stream, drawing: bool):
    """The random stream dropout draws from: `stream()` when set and dropout is drawing, else the default."""
    return stream() if stream is not None and drawing else contextlib.nullcontext()


class Attention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.qkv = nn.Linear(config.hidden_size, (config.num_attention_heads + 2 * config.kv_heads) * config.head_dim,
                             bias=config.qkv_bias)
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
        swiglu = config.activation == "swiglu"
        self.gate = nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=config.bias) if swiglu else None
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
    def __init__(self, config: GPTConfig, seed: int = 0):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        learned = config.position_embedding == "learned"
        self.wpe = nn.Embedding(config.max_position_embeddings, config.hidden_size) if learned else None
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
        self.reset_parameters(seed)

    def set_recompute(self, granularity: str | None) -> None:
        """Activation checkpointing, as Megatron's --recompute-granularity: "full" recomputes every block in
        the backward pass, "selective" only the attention core (the part whose activations grow with T^2)."""
        self.recompute_blocks = granularity == "full"
        for block in self.blocks.values():
            block.attn.recompute = granularity == "selective"

    def reset_parameters(self, seed: int = 0) -> None:
        """Megatron's init: N(0, 0.02) weights, zero biases, unit norms; the two projections that write
        into the residual stream scaled by 1/sqrt(2 * layers).

        Each weight is drawn whole, on the CPU, from a generator of its own seeded with `seed` and the
        parameter's name: the same values on any device and in any layout, where a pipeline stage or a
        tensor- or data-parallel shard (a DTensor) keeps its part of the one draw. On the meta device
        (a model built without storage, see `materialize`) nothing is drawn."""
        std = self.config.init_std
        for name, p in self.named_parameters():
            if p.is_meta:
                continue
            if p.ndim < 2:
                value = torch.ones(p.shape) if "norm" in name else torch.zeros(p.shape)
            else:
                scaled = name.endswith(("attn.proj.weight", "mlp.fc2.weight"))
                value = torch.empty(p.shape).normal_(0.0, std / math.sqrt(2 * self.config.num_layers) if scaled else std,
                                                     generator=parameter_generator(seed, name))
            copy_whole(p, value)

    def materialize(self, device: torch.device, seed: int) -> None:
        """Storage on `device` and initial values for a model built on the meta device, after it was cut
        into pipeline stages and sharded there: each rank allocates only the parts it holds."""
        self.allocate(device)
        self.reset_parameters(seed)

    def allocate(self, device: torch.device) -> None:
        """Storage on `device` for a model built on the meta device, the weights left for a checkpoint to fill
        (drawing them first would cost as long as a large model takes to read); the RoPE tables computed."""
        self.to_empty(device=device)
        if self.config.position_embedding == "rope":
            with torch.no_grad():  # made on the CPU, as in __init__: the same tables on every device
                for buffer, table in zip((self.rope_cos, self.rope_sin), rope_tables(self.config), strict=True):
                    buffer.copy_(table)

    @classmethod
    def for_loading(cls, config: GPTConfig) -> "GPT":
        """A model on the CPU whose weights are about to be loaded: no random values drawn."""
        with torch.device("meta"):
            model = cls(config)
        model.allocate(torch.device("cpu"))
        return model

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


def training_flops(config: GPTConfig, batch: int, seq_len: int) -> float:
    """Model FLOPs of one training step on `batch` sequences: 3 x the forward pass (backward = 2 x forward),
    no recomputation counted, matrix multiplications only (2 FLOPs per multiply-add):
        forward = L * (2 B s h (2h + kv) + 4 B s^2 h + 2 B s h f m) + 2 B s h V
    (Q, K, V and output projections, kv = the key and value widths, 2h without grouped-query attention; attention
    scores and their weighted sum; the MLP with f = ffn size and m = 2 matrices, 3 for SwiGLU; the logits). For GPT-2
    (f = 4h) this is Megatron's
    72 B s L h^2 (1 + s / (6h) + V / (12 L h)) (Narayanan et al. 2021, without the recomputation pass)."""
    B, s, L, h, V, f = batch, seq_len, config.num_layers, config.hidden_size, config.vocab_size, config.ffn_hidden_size
    m = 3 if config.activation == "swiglu" else 2
    kv = 2 * config.kv_heads * config.head_dim  # key and value widths (2h without grouped-query attention)
    forward = L * (2 * B * s * h * (2 * h + kv) + 4 * B * s * s * h + 2 * B * s * h * f * m) + 2 * B * s * h * V
    return 3.0 * forward


def activation_bytes(config: GPTConfig, batch: int, seq_len: int) -> float:
    """Bytes the forward pass of one micro-batch keeps for the backward pass, in 16-bit compute (Korthikanti
    et al. 2022, eq. 2): 34 s b h per layer (attention 11, MLP 19, norms 4; dropout masks one byte a value).
    Their 5 a s^2 b term, the attention scores, is left out: SDPA's flash kernel keeps none. The loss keeps no
    logits (trainer/loss.py), so the layers are the whole estimate."""
    return 34.0 * seq_len * batch * config.hidden_size * config.num_layers
