"""The GPT model: GPT-2 by default, LLaMA-style blocks behind flags. One file, the math visible.

GPT-2: learned position embeddings, pre-LayerNorm blocks, GELU MLP (4h), tied input/output embeddings,
biases everywhere. LLaMA-style (as Megatron-LLaMA offers): rotary position embeddings, RMSNorm, SwiGLU MLP,
no biases, untied output layer. Attention goes through `scaled_dot_product_attention` (flash or
memory-efficient kernels on GPU).

The query/key/value projection is one [3h, h] matrix whose rows are grouped per head as
[heads, (q, k, v), head_dim]: Megatron's layout since checkpoint version 2.0, and the one where splitting
the rows into contiguous blocks gives each tensor-parallel rank whole heads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GPTConfig:
    vocab_size: int  # padded, as Megatron pads it (tokenizers.gpt2.padded_vocab_size)
    num_layers: int = 12
    hidden_size: int = 768
    num_attention_heads: int = 12
    max_position_embeddings: int = 1024
    ffn_hidden_size: int | None = None  # 4h for GELU; SwiGLU defaults to Megatron-LLaMA's 2/3 of 4h, rounded
    position_embedding: str = "learned"  # or "rope"
    normalization: str = "layernorm"  # or "rmsnorm"
    activation: str = "gelu"  # "gelu" (exact, Megatron's default), "gelu_tanh" (OpenAI GPT-2), "swiglu"
    tie_embeddings: bool = True
    bias: bool = True
    norm_epsilon: float = 1e-5
    rope_theta: float = 10000.0
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    init_std: float = 0.02
    extra: dict = field(default_factory=dict)  # room for settings that do not change the math

    def __post_init__(self):
        if self.ffn_hidden_size is None:
            if self.activation == "swiglu":
                self.ffn_hidden_size = 256 * math.ceil(int(8 * self.hidden_size / 3) / 256)
            else:
                self.ffn_hidden_size = 4 * self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict:
        return asdict(self)

    def architecture(self) -> dict:
        """The fields that decide the shapes and the math of the trained function (not dropout or init),
        i.e. what a checkpoint's weights must agree with."""
        return {k: v for k, v in asdict(self).items()
                if k not in ("hidden_dropout", "attention_dropout", "init_std", "extra")}


# Named sizes: GPT-2's four (Radford et al. 2019, as Megatron configures them) and one for CPU runs.
PRESETS = {
    "tiny": dict(num_layers=2, hidden_size=64, num_attention_heads=4, max_position_embeddings=256),
    "gpt2-124m": dict(num_layers=12, hidden_size=768, num_attention_heads=12, max_position_embeddings=1024),
    "gpt2-345m": dict(num_layers=24, hidden_size=1024, num_attention_heads=16, max_position_embeddings=1024),
    "gpt2-774m": dict(num_layers=36, hidden_size=1280, num_attention_heads=20, max_position_embeddings=1024),
    "gpt2-1.5b": dict(num_layers=48, hidden_size=1600, num_attention_heads=25, max_position_embeddings=1024),
}


def make_norm(cfg: GPTConfig) -> nn.Module:
    if cfg.normalization == "rmsnorm":
        return nn.RMSNorm(cfg.hidden_size, eps=cfg.norm_epsilon)
    return nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_epsilon, bias=cfg.bias)


def rope_tables(cfg: GPTConfig, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position x frequency, [positions, head_dim / 2], in fp32."""
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device, dtype=torch.float32) / cfg.head_dim))
    angles = torch.outer(torch.arange(cfg.max_position_embeddings, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (first half, second half) pair of x [B, heads, T, head_dim] by its position's angle."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return rotated.type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=cfg.bias)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.bias)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        B, T, _ = x.shape
        # [B, T, heads_here, 3, head_dim]: heads_here is all heads, or this rank's share under tensor parallelism
        qkv = self.qkv(x).view(B, T, -1, 3, self.cfg.head_dim)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))  # each [B, heads, T, head_dim]
        if rope is not None:
            cos, sin = rope[0][:T], rope[1][:T]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        dropout = self.cfg.attention_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    """fc2(act(fc1(x))); SwiGLU: fc2(silu(gate(x)) * fc1(x)). The gate is its own matrix rather than half
    of a fused one, so a column split for tensor parallelism gives each rank matching gate and up halves."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size, bias=cfg.bias)
        self.gate = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size, bias=cfg.bias) if cfg.activation == "swiglu" else None
        self.fc2 = nn.Linear(cfg.ffn_hidden_size, cfg.hidden_size, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            h = F.silu(self.gate(x)) * self.fc1(x)
        else:
            h = F.gelu(self.fc1(x), approximate="tanh" if self.cfg.activation == "gelu_tanh" else "none")
        return self.fc2(h)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.norm1, self.attn = make_norm(cfg), Attention(cfg)
        self.norm2, self.mlp = make_norm(cfg), MLP(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: torch.Tensor, rope=None) -> torch.Tensor:
        x = x + self.dropout(self.attn(self.norm1(x), rope))
        return x + self.dropout(self.mlp(self.norm2(x)))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.wpe = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size) if cfg.position_embedding == "learned" else None
        self.drop = nn.Dropout(cfg.hidden_dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm_f = make_norm(cfg)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.position_embedding == "rope":
            cos, sin = rope_tables(cfg)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Megatron's init: N(0, 0.02) weights, zero biases, unit norms; the two projections that write
        into the residual stream scaled by 1/sqrt(2 * layers)."""
        std = self.cfg.init_std
        for name, p in self.named_parameters():
            if p.ndim < 2:
                nn.init.ones_(p) if "norm" in name else nn.init.zeros_(p)
            elif name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * self.cfg.num_layers))
            else:
                nn.init.normal_(p, 0.0, std)

    def output_weight(self) -> torch.Tensor:
        return self.wte.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor | None = None,
                loss_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, T, padded vocab] for token ids [B, T]; with labels [B, T], the mean cross-entropy
        instead (computed without materialising the logits: see LanguageModelLoss)."""
        B, T = tokens.shape
        if T > self.cfg.max_position_embeddings:
            raise ValueError(f"sequence of {T} tokens is longer than the {self.cfg.max_position_embeddings} positions")
        x = self.wte(tokens)
        rope = None
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=tokens.device))
        else:
            rope = (self.rope_cos, self.rope_sin)
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, rope)
        x = self.norm_f(x)
        if labels is not None:
            return language_model_loss(x, self.output_weight(), labels, loss_mask)
        return F.linear(x, self.output_weight())

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class LanguageModelLoss(torch.autograd.Function):
    """Mean cross-entropy of the logits hidden @ weight.T against labels, without ever holding all logits.

    The logits of a GPT-2 batch are the largest tensor of a step (8 x 1024 x 50304 fp32 = 1.6 GB, and
    as much again for their gradient). Rows go through in chunks of about LOSS_CHUNK_BYTES of logits;
    since the loss is a scalar, each chunk's gradients are known as soon as its softmax is:
        d loss / d logits = (softmax(logits) - onehot(label)) * mask / sum(mask)
    so the forward pass computes d hidden = P @ weight and d weight = P.T @ hidden right away and the
    backward pass only scales them. Same FLOPs as the plain way, a fraction of the memory traffic."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, loss_mask):
        device = hidden.device.type
        # Matrix products in the autocast dtype when autocast is on (as F.linear would be), softmax in fp32.
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
        rows = max(1, LOSS_CHUNK_BYTES // (4 * weight.shape[0]))
        want_grads = any(ctx.needs_input_grad[:2])
        mask = loss_mask.float()
        denominator = mask.sum()
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        with torch.autocast(device, enabled=False):
            w = weight.to(dtype)
            grad_hidden = torch.empty_like(hidden) if want_grads else None
            grad_weight = None
            for start in range(0, hidden.shape[0], rows):
                h, y, m = hidden[start : start + rows].to(dtype), labels[start : start + rows], mask[start : start + rows]
                logits = (h @ w.t()).float()
                log_z = torch.logsumexp(logits, dim=-1)
                total += ((log_z - logits.gather(1, y[:, None])[:, 0]) * m).sum()
                if want_grads:
                    probs = logits.sub_(log_z[:, None]).exp_()
                    probs[torch.arange(len(y), device=y.device), y] -= 1.0
                    probs.mul_((m / denominator)[:, None])
                    grad_hidden[start : start + rows] = probs.to(dtype) @ w
                    if grad_weight is None:
                        grad_weight = probs.t() @ h.float()
                    else:
                        grad_weight.addmm_(probs.t(), h.float())
        if want_grads:
            ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        return total / denominator

    @staticmethod
    def backward(ctx, grad_loss):
        # Scaled in place: these buffers are this step's alone (so the graph can be run backward once).
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden.mul_(grad_loss), grad_weight.mul_(grad_loss), None, None


LOSS_CHUNK_BYTES = 1 << 27


def language_model_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                        loss_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy (over unmasked positions) of next-token logits hidden @ weight.T, in fp32.
    hidden [B, T, h], weight [V, h], labels [B, T]."""
    hidden, labels = hidden.flatten(0, 1), labels.flatten()
    mask = torch.ones_like(labels, dtype=torch.float32) if loss_mask is None else loss_mask.flatten()
    return LanguageModelLoss.apply(hidden, weight, labels, mask)


def training_flops(cfg: GPTConfig, batch: int, seq_len: int) -> float:
    """Model FLOPs of one training step on `batch` sequences: 3 x the forward pass (backward = 2 x forward),
    no recomputation counted, matrix multiplications only (2 FLOPs per multiply-add):
        forward = L * (8 B s h^2 + 4 B s^2 h + 2 B s h f m) + 2 B s h V
    (QKV and output projections; attention scores and their weighted sum; the MLP with f = ffn size and
    m = 2 matrices, 3 for SwiGLU; the logits). For GPT-2 (f = 4h) this is Megatron's
    72 B s L h^2 (1 + s / (6h) + V / (12 L h)) (Narayanan et al. 2021, without the recomputation pass)."""
    B, s, L, h, V, f = batch, seq_len, cfg.num_layers, cfg.hidden_size, cfg.vocab_size, cfg.ffn_hidden_size
    m = 3 if cfg.activation == "swiglu" else 2
    forward = L * (8 * B * s * h * h + 4 * B * s * s * h + 2 * B * s * h * f * m) + 2 * B * s * h * V
    return 3.0 * forward
