"""The model's shape: GPTConfig (the one config of every model family textmill builds, checked before any
tensor, since it also comes from checkpoints and Hugging Face config.json files) and the named sizes. Nothing
here imports torch."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

from textmill.errors import TextmillError

# Named sizes: GPT-2's four (Radford et al. 2019, as Megatron configures them) and one for CPU runs.
PRESETS = {
    "tiny": dict(num_layers=2, hidden_size=64, num_attention_heads=4, max_position_embeddings=256),
    "gpt2-124m": dict(num_layers=12, hidden_size=768, num_attention_heads=12, max_position_embeddings=1024),
    "gpt2-345m": dict(num_layers=24, hidden_size=1024, num_attention_heads=16, max_position_embeddings=1024),
    "gpt2-774m": dict(num_layers=36, hidden_size=1280, num_attention_heads=20, max_position_embeddings=1024),
    "gpt2-1.5b": dict(num_layers=48, hidden_size=1600, num_attention_heads=25, max_position_embeddings=1024),
}


@dataclass
class GPTConfig:
    vocab_size: int  # padded, as Megatron pads it (tokenizers.gpt2.padded_vocab_size)
    num_layers: int = 12
    hidden_size: int = 768
    num_attention_heads: int = 12
    max_position_embeddings: int = 1024
    ffn_hidden_size: int | None = None  # 4h for GELU; SwiGLU defaults to Megatron-LLaMA's 2/3 of 4h, rounded
    position_embedding: Literal["learned", "rope"] = "learned"
    normalization: Literal["layernorm", "rmsnorm"] = "layernorm"
    activation: Literal["gelu", "gelu_tanh", "swiglu"] = "gelu"  # exact GELU (Megatron's default), tanh (OpenAI GPT-2), SwiGLU
    tie_embeddings: bool = True
    bias: bool = True
    norm_epsilon: float = 1e-5
    rope_theta: float = 10000.0
    # LLaMA 3.1's rope scaling ("llama3"): frequencies with wavelengths beyond the original context divided by
    # the factor, those within it by the high-frequency factor kept, those between blended.
    rope_scaling: Literal["none", "llama3"] = "none"
    rope_scaling_factor: float = 8.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_positions: int = 8192
    num_query_groups: int | None = None  # K/V heads, each shared by heads / groups query heads (None: one per head)
    rotary_percent: float = 1.0  # the share of each head's dimensions that rotary embeddings turn (GPT-NeoX: 0.25)
    rotary_interleaved: bool = False  # RoPE pairs (0, 1), (2, 3), ... (GPT-J), not (i, i + rotary_dim / 2)
    parallel_residual: bool = False  # x + attn(norm1(x)) + mlp(norm2(x)), one residual add (GPT-NeoX, GPT-J)
    shared_input_norm: bool = False  # parallel residual with one norm: x + attn(norm1(x)) + mlp(norm1(x)) (GPT-J)
    attention_bias: bool | None = None  # biases in the QKV and output projections (None: as `bias`; GPT-J: none)
    qkv_bias: bool | None = None  # a bias on the QKV projection (None: as `attention_bias`; Qwen2: one there only)
    output_bias: bool = False  # a bias on the untied output layer (GPT-J)
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    init_std: float = 0.02
    # The Hugging Face model_type the model was imported as: its export names that class again while the shape
    # fits (a Mistral without a sliding window is a LLaMA in shape). Not part of the function.
    family: str | None = None

    def __post_init__(self):
        # A config also comes from files (checkpoints, Hugging Face config.json): check it before any tensor.
        for name in ("vocab_size", "num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TextmillError(f"model config: {name} must be a positive whole number, not {value!r}")
        if self.num_query_groups is not None and (
                not isinstance(self.num_query_groups, int) or self.num_query_groups < 1
                or self.num_attention_heads % self.num_query_groups):
            raise TextmillError(f"model config: num_query_groups {self.num_query_groups!r} must divide the "
                                f"{self.num_attention_heads} attention heads")
        if self.attention_bias is None:
            self.attention_bias = self.bias
        if self.qkv_bias is None:
            self.qkv_bias = self.attention_bias
        if self.shared_input_norm and not self.parallel_residual:
            raise TextmillError("model config: a shared input norm needs the parallel residual (--use-parallel-residual)")
        if self.output_bias and self.tie_embeddings:
            raise TextmillError("model config: an output layer bias needs an untied output layer "
                                "(--untie-embeddings-and-output-weights)")
        if self.num_query_groups == self.num_attention_heads:  # one group per head is plain attention
            self.num_query_groups = None
        if self.ffn_hidden_size is None:
            if self.activation == "swiglu":
                self.ffn_hidden_size = 256 * math.ceil(int(8 * self.hidden_size / 3) / 256)
            else:
                self.ffn_hidden_size = 4 * self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def rotary_dim(self) -> int:
        """The leading dimensions of each query and key head that rotary embeddings turn (an even count)."""
        return 2 * int(self.head_dim * self.rotary_percent / 2)

    @property
    def kv_heads(self) -> int:
        """Key/value heads: the query groups (grouped-query attention), else one per query head."""
        return self.num_query_groups or self.num_attention_heads

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "GPTConfig":
        """The config a checkpoint recorded. Checkpoints of textmill 0.1 also carry "extra", which was always
        empty: it is dropped."""
        return cls(**{k: v for k, v in values.items() if k != "extra"})

    def architecture(self) -> dict:
        """The fields that decide the shapes and the math of the trained function (not dropout or init),
        i.e. what a checkpoint's weights must agree with."""
        return {k: v for k, v in asdict(self).items()
                if k not in ("hidden_dropout", "attention_dropout", "init_std", "family")}
