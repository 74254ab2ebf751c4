"""Each model family textmill reads and writes, one object a family: its tensor names in every format, which of
textmill's model shapes it is (`matches`), its Hugging Face config both ways, and its attention projection both
ways. Adding a family is one object here (and a row in the round-trip tests), as transformers keeps one
converter per model and torchtitan one state-dict adapter per model.

Names are textmill's (the keys of `GPT.state_dict()`, blocks as `blocks.N.`) against the format's, read in
both directions. The fused attention projection is the one tensor that is not a rename in Hugging Face's
formats: textmill (like Megatron since checkpoint version 2.0) groups its rows per query group, [groups,
(queries, k, v), head_dim] ([heads, (q, k, v), head_dim] without grouped-query attention); GPT-2 wants [Q all
heads; K all heads; V all heads], stored transposed because its `Conv1D` keeps [in, out]; LLaMA, Mistral, Qwen2
and GPT-J want three separate matrices, K and V with num_key_value_heads heads (docs/REFERENCE.md section 7.3);
GPT-NeoX fuses them in textmill's own per-head layout (a rename). Megatron-LM's is a rename in its current
order, and interop/megatron.py reorders older versions.
"""

from __future__ import annotations

from dataclasses import dataclass

from textmill.errors import TextmillError
from textmill.trainer.gpt_config import GPTConfig

GPT2_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new"}
# Hugging Face names of the tanh-approximated GELU (the same function up to rounding).
HF_TANH_GELUS = ("gelu_new", "gelu_fast", "gelu_pytorch_tanh")


def with_bias(pairs: tuple[tuple[str, str], ...], transposed: bool = False) -> tuple[tuple[str, str, bool], ...]:
    """Module name pairs as (ours, theirs, transposed) for their weight and bias."""
    return tuple((f"{ours}.{p}", f"{theirs}.{p}", transposed) for ours, theirs in pairs for p in ("weight", "bias"))


def split_qkv(w, model_config: GPTConfig) -> tuple:
    """Rows grouped per query group, [groups, (queries, k, v), head_dim, ...] -> Q [heads * head_dim, ...],
    K and V [groups * head_dim, ...] (every head its own group without grouped-query attention)."""
    groups, queries = model_config.kv_heads, model_config.num_attention_heads // model_config.kv_heads
    grouped = w.reshape(groups, queries + 2, model_config.head_dim, *w.shape[1:])
    return (grouped[:, :queries].reshape(-1, *w.shape[1:]), grouped[:, queries].reshape(-1, *w.shape[1:]),
            grouped[:, queries + 1].reshape(-1, *w.shape[1:]))


def join_qkv(q, k, v, model_config: GPTConfig):
    """Inverse of split_qkv."""
    import torch

    groups, head_dim = model_config.kv_heads, model_config.head_dim
    parts = [q.reshape(groups, -1, head_dim, *q.shape[1:]), k.reshape(groups, 1, head_dim, *k.shape[1:]),
             v.reshape(groups, 1, head_dim, *v.shape[1:])]
    return torch.cat(parts, dim=1).reshape(-1, *q.shape[1:])


def one_line(family: str, problems: list[str]) -> None:
    """Refuse a Hugging Face config in one line naming everything textmill's blocks lack, if anything."""
    problems = [p for p in problems if p]
    if problems:
        raise TextmillError(f"this {family} model uses what textmill's blocks do not have: " + "; ".join(problems))


def simple_block(c: GPTConfig) -> bool:
    """One residual add per branch, every dimension rotated, attention's projections biased as the others
    (the QKV bias is each family's to check)."""
    return not (c.parallel_residual or c.shared_input_norm or c.rotary_interleaved or c.output_bias
                or c.rotary_percent != 1 or c.attention_bias != c.bias)


@dataclass(frozen=True)
class Family:
    # Hugging Face transformers: model_type and class, block prefix ("{}" the layer), token embedding, the other
    # global tensors (ours, theirs), the blocks' tensors (ours, theirs, transposed: GPT-2's Conv1D keeps [in, out]),
    # the separate q/k/v projections where the family has them ("{}" is q, k or v), and the output layer.
    model_type: str
    title: str  # as people write it, in messages
    hf_class: str
    hf_layer: str
    hf_embedding: str
    hf_globals: tuple[tuple[str, str], ...]
    hf_layers: tuple[tuple[str, str, bool], ...]
    hf_qkv: str | None = None
    hf_output: str = "lm_head.weight"
    # Megatron-LM's legacy GPT model, where it has the family's blocks: block modules, ours -> theirs (their
    # weight and bias alike; `self_attention` is `attention` before checkpoint version 3.0), and the final norm.
    megatron_block: dict[str, str] | None = None
    megatron_final_norm: str | None = None
    # Megatron-core's GPTModel (under `decoder.`, the same final norm): block modules, and the norms Transformer
    # Engine's layers hold fused into the next linear layer (`linear_qkv.layer_norm_weight`).
    megatron_core_block: dict[str, str] | None = None
    megatron_core_fused_norms: dict[str, str] | None = None

    def matches(self, c: GPTConfig) -> bool:
        """Whether a model of this shape is one of this family's."""
        raise NotImplementedError

    def hf_settings(self, c: GPTConfig) -> dict:
        """config.json's family-specific entries for this model."""
        raise NotImplementedError

    def config_from_hf(self, hf: dict, padded_vocab: int) -> GPTConfig:
        """textmill's model for a config.json of this family, or one error line naming what it lacks."""
        raise NotImplementedError

    def qkv_to_hf(self, layer: dict, c: GPTConfig) -> dict:
        """One block's fused projection (our names, without the block prefix) as the family's separate q, k, v."""
        out = dict(zip((f"{self.hf_qkv.format(p)}.weight" for p in "qkv"), split_qkv(layer["attn.qkv.weight"], c),
                       strict=True))
        if c.qkv_bias:
            out.update(zip((f"{self.hf_qkv.format(p)}.bias" for p in "qkv"), split_qkv(layer["attn.qkv.bias"], c),
                           strict=True))
        return out

    def qkv_from_hf(self, layer: dict, c: GPTConfig) -> dict:
        """Inverse of qkv_to_hf."""
        out = {"attn.qkv.weight": join_qkv(*(layer[f"{self.hf_qkv.format(p)}.weight"] for p in "qkv"), c)}
        if c.qkv_bias:
            out["attn.qkv.bias"] = join_qkv(*(layer[f"{self.hf_qkv.format(p)}.bias"] for p in "qkv"), c)
        return out


class GPT2(Family):
    def matches(self, c: GPTConfig) -> bool:
        return ((c.position_embedding, c.normalization, c.bias) == ("learned", "layernorm", True)
                and c.kv_heads == c.num_attention_heads and c.activation in GPT2_ACTIVATIONS and simple_block(c) and c.qkv_bias)

    def hf_settings(self, c: GPTConfig) -> dict:
        return {"n_positions": c.max_position_embeddings, "n_embd": c.hidden_size, "n_layer": c.num_layers,
                "n_head": c.num_attention_heads, "n_inner": c.ffn_hidden_size,
                "activation_function": GPT2_ACTIVATIONS[c.activation], "layer_norm_epsilon": c.norm_epsilon,
                "resid_pdrop": c.hidden_dropout, "embd_pdrop": c.hidden_dropout,
                "attn_pdrop": c.attention_dropout, "scale_attn_weights": True}

    def config_from_hf(self, hf: dict, padded_vocab: int) -> GPTConfig:
        act = hf.get("activation_function", "gelu_new")
        one_line(self.title, [f"activation {act!r} (gelu or a tanh GELU)" if act not in ("gelu", *HF_TANH_GELUS) else ""]
                 + [f"option {flag}" if hf.get(flag) else ""
                    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention")])
        return GPTConfig(vocab_size=padded_vocab, num_layers=hf["n_layer"], hidden_size=hf["n_embd"],
                         num_attention_heads=hf["n_head"], max_position_embeddings=hf["n_positions"],
                         ffn_hidden_size=hf.get("n_inner"), activation="gelu" if act == "gelu" else "gelu_tanh",
                         norm_epsilon=hf.get("layer_norm_epsilon", 1e-5), tie_embeddings=hf.get("tie_word_embeddings", True),
                         hidden_dropout=hf.get("resid_pdrop", 0.1), attention_dropout=hf.get("attn_pdrop", 0.1),
                         init_std=hf.get("initializer_range", 0.02), family=self.model_type)

    def qkv_to_hf(self, layer: dict, c: GPTConfig) -> dict:
        import torch

        return {"attn.c_attn.weight": torch.cat(split_qkv(layer["attn.qkv.weight"], c)).t(),
                "attn.c_attn.bias": torch.cat(split_qkv(layer["attn.qkv.bias"], c))}

    def qkv_from_hf(self, layer: dict, c: GPTConfig) -> dict:
        return {"attn.qkv.weight": join_qkv(*layer["attn.c_attn.weight"].t().chunk(3), c),
                "attn.qkv.bias": join_qkv(*layer["attn.c_attn.bias"].chunk(3), c)}


def hf_rope(c: GPTConfig) -> dict:
    """Rope parameters as transformers names them (LLaMA 3.1's scaling with its four numbers)."""
    if c.rope_scaling == "none":
        return {"rope_type": "default", "rope_theta": c.rope_theta}
    return {"rope_type": "llama3", "rope_theta": c.rope_theta, "factor": c.rope_scaling_factor,
            "low_freq_factor": c.rope_low_freq_factor, "high_freq_factor": c.rope_high_freq_factor,
            "original_max_position_embeddings": c.rope_original_max_positions}


class Llama(Family):
    """RoPE, RMSNorm, SwiGLU, no biases, grouped-query attention, LLaMA 3.1's rope scaling."""

    qkv_bias = False

    def matches(self, c: GPTConfig) -> bool:
        return ((c.position_embedding, c.normalization, c.activation, c.bias) == ("rope", "rmsnorm", "swiglu", False)
                and simple_block(c) and c.qkv_bias == self.qkv_bias)

    def hf_settings(self, c: GPTConfig) -> dict:
        return {"hidden_size": c.hidden_size, "intermediate_size": c.ffn_hidden_size, "num_hidden_layers": c.num_layers,
                "num_attention_heads": c.num_attention_heads, "num_key_value_heads": c.kv_heads, "head_dim": c.head_dim,
                "hidden_act": "silu", "max_position_embeddings": c.max_position_embeddings, "rms_norm_eps": c.norm_epsilon,
                "rope_theta": c.rope_theta, "rope_parameters": hf_rope(c), "rope_scaling": hf_rope(c),
                "attention_dropout": c.attention_dropout, **self.block_settings()}

    def block_settings(self) -> dict:
        return {"attention_bias": False, "mlp_bias": False}

    def problems(self, hf: dict) -> list[str]:
        """What of this config.json textmill's blocks lack beyond LLaMA's shape."""
        return ["attention or MLP biases" if hf.get("attention_bias") or hf.get("mlp_bias") else ""]

    def config_from_hf(self, hf: dict, padded_vocab: int) -> GPTConfig:
        heads = hf["num_attention_heads"]
        rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        head_dim = hf.get("head_dim") or hf["hidden_size"] // heads
        one_line(self.title, [
            f"head_dim {head_dim} != hidden / heads" if head_dim * heads != hf["hidden_size"] else "",
            f"rope type {rope_type!r} (default or llama3)" if rope_type not in ("default", "llama3") else "",
            f"activation {hf.get('hidden_act')!r}" if hf.get("hidden_act", "silu") != "silu" else "",
            *self.problems(hf)])
        return GPTConfig(vocab_size=padded_vocab, num_layers=hf["num_hidden_layers"], hidden_size=hf["hidden_size"],
                         num_attention_heads=heads, max_position_embeddings=hf["max_position_embeddings"],
                         ffn_hidden_size=hf["intermediate_size"], position_embedding="rope", normalization="rmsnorm",
                         activation="swiglu", bias=False, qkv_bias=self.qkv_bias, norm_epsilon=hf.get("rms_norm_eps", 1e-6),
                         rope_theta=rope.get("rope_theta", hf.get("rope_theta", 10000.0)),
                         num_query_groups=hf.get("num_key_value_heads", heads),
                         **({} if rope_type == "default" else dict(
                             rope_scaling="llama3", rope_scaling_factor=rope["factor"],
                             rope_low_freq_factor=rope["low_freq_factor"], rope_high_freq_factor=rope["high_freq_factor"],
                             rope_original_max_positions=rope["original_max_position_embeddings"])),
                         tie_embeddings=hf.get("tie_word_embeddings", False), hidden_dropout=0.0,
                         attention_dropout=hf.get("attention_dropout", 0.0), init_std=hf.get("initializer_range", 0.02),
                         family=self.model_type)


class Mistral(Llama):
    """LLaMA's block; its sliding-window attention is refused where the window is shorter than the context."""

    def block_settings(self) -> dict:
        return {"sliding_window": None}

    def problems(self, hf: dict) -> list[str]:
        window = hf.get("sliding_window")
        return [f"sliding-window attention ({window} of {hf['max_position_embeddings']} positions)"
                if window is not None and window < hf["max_position_embeddings"] else ""]


class Qwen2(Llama):
    """LLaMA's block with a bias on the query, key and value projections (only there)."""

    qkv_bias = True

    def block_settings(self) -> dict:
        return {"use_sliding_window": False, "sliding_window": None}

    def problems(self, hf: dict) -> list[str]:
        layers = set(hf.get("layer_types") or ["full_attention"])
        return ["sliding-window attention" if hf.get("use_sliding_window") or layers != {"full_attention"} else ""]


class GPTNeoX(Family):
    """Partial RoPE, LayerNorm, GELU, biases, an untied output, a parallel residual or not."""

    def matches(self, c: GPTConfig) -> bool:
        return (rope_layernorm(c) and c.activation == "gelu"
                and not (c.rotary_interleaved or c.shared_input_norm or c.output_bias)
                and c.attention_bias == c.qkv_bias == c.bias)

    def hf_settings(self, c: GPTConfig) -> dict:
        return {"hidden_size": c.hidden_size, "intermediate_size": c.ffn_hidden_size, "num_hidden_layers": c.num_layers,
                "num_attention_heads": c.num_attention_heads, "hidden_act": "gelu",
                "max_position_embeddings": c.max_position_embeddings,
                "layer_norm_eps": c.norm_epsilon, "use_parallel_residual": c.parallel_residual, "attention_bias": True,
                "rotary_pct": c.rotary_percent, "rotary_emb_base": c.rope_theta,
                "rope_parameters": {"rope_type": "default", "rope_theta": c.rope_theta,
                                    "partial_rotary_factor": c.rotary_percent},
                "hidden_dropout": c.hidden_dropout, "attention_dropout": c.attention_dropout}

    def config_from_hf(self, hf: dict, padded_vocab: int) -> GPTConfig:
        rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
        one_line(self.title, [f"rope type {rope.get('rope_type')!r}" if rope.get("rope_type", "default") != "default" else "",
                              f"activation {hf.get('hidden_act')!r}" if hf.get("hidden_act", "gelu") != "gelu" else "",
                              "no attention biases" if not hf.get("attention_bias", True) else "",
                              "tied input and output embeddings" if hf.get("tie_word_embeddings") else ""])
        return GPTConfig(vocab_size=padded_vocab, num_layers=hf["num_hidden_layers"], hidden_size=hf["hidden_size"],
                         num_attention_heads=hf["num_attention_heads"], max_position_embeddings=hf["max_position_embeddings"],
                         ffn_hidden_size=hf["intermediate_size"], position_embedding="rope", normalization="layernorm",
                         activation="gelu", bias=True, tie_embeddings=False, norm_epsilon=hf.get("layer_norm_eps", 1e-5),
                         rope_theta=rope.get("rope_theta", hf.get("rotary_emb_base", 10000.0)),
                         rotary_percent=rope.get("partial_rotary_factor", hf.get("rotary_pct", 1.0)),
                         parallel_residual=hf.get("use_parallel_residual", True),
                         hidden_dropout=hf.get("hidden_dropout", 0.0), attention_dropout=hf.get("attention_dropout", 0.0),
                         init_std=hf.get("initializer_range", 0.02), family=self.model_type)

    def qkv_to_hf(self, layer: dict, c: GPTConfig) -> dict:
        return {}  # renamed with the other tensors

    def qkv_from_hf(self, layer: dict, c: GPTConfig) -> dict:
        return {}


def rope_layernorm(c: GPTConfig) -> bool:
    """GPT-NeoX's and GPT-J's common ground: RoPE (unscaled), LayerNorm, biases, an untied output, no query groups."""
    return ((c.position_embedding, c.normalization, c.bias, c.tie_embeddings, c.kv_heads, c.rope_scaling)
            == ("rope", "layernorm", True, False, c.num_attention_heads, "none"))


class GPTJ(Family):
    """Partial interleaved RoPE (base 10000), one LayerNorm per block, tanh GELU, parallel residual, no attention
    biases, an untied output layer with a bias."""

    def matches(self, c: GPTConfig) -> bool:
        return (rope_layernorm(c) and c.activation == "gelu_tanh" and c.rotary_interleaved and c.shared_input_norm
                and c.output_bias and not c.attention_bias and not c.qkv_bias and c.parallel_residual and c.rope_theta == 10000)

    def hf_settings(self, c: GPTConfig) -> dict:
        return {"n_positions": c.max_position_embeddings, "n_embd": c.hidden_size, "n_layer": c.num_layers,
                "n_head": c.num_attention_heads, "n_inner": c.ffn_hidden_size, "rotary_dim": c.rotary_dim,
                "activation_function": "gelu_new", "layer_norm_epsilon": c.norm_epsilon, "resid_pdrop": c.hidden_dropout,
                "embd_pdrop": c.hidden_dropout, "attn_pdrop": c.attention_dropout}

    def config_from_hf(self, hf: dict, padded_vocab: int) -> GPTConfig:
        heads, hidden = hf["n_head"], hf["n_embd"]
        rotary_dim = hf.get("rotary_dim")
        act = hf.get("activation_function", "gelu_new")
        one_line(self.title, [f"activation {act!r} (a tanh GELU)" if act not in HF_TANH_GELUS else "",
                           "tied input and output embeddings" if hf.get("tie_word_embeddings") else "",
                           f"rotary_dim {rotary_dim!r} (an even number of dimensions up to the head's {hidden // heads})"
                           if not isinstance(rotary_dim, int) or rotary_dim % 2 or not 0 < rotary_dim <= hidden // heads else ""])
        config = GPTConfig(vocab_size=padded_vocab, num_layers=hf["n_layer"], hidden_size=hidden, num_attention_heads=heads,
                           max_position_embeddings=hf["n_positions"], ffn_hidden_size=hf.get("n_inner"),
                           position_embedding="rope", rotary_percent=rotary_dim / (hidden // heads), rotary_interleaved=True,
                           normalization="layernorm", activation="gelu_tanh", bias=True, attention_bias=False,
                           parallel_residual=True, shared_input_norm=True, tie_embeddings=False, output_bias=True,
                           norm_epsilon=hf.get("layer_norm_epsilon", 1e-5), hidden_dropout=hf.get("resid_pdrop", 0.0),
                           attention_dropout=hf.get("attn_pdrop", 0.0), init_std=hf.get("initializer_range", 0.02),
                           family=self.model_type)
        if config.rotary_dim != rotary_dim:  # the share must give back the same count of dimensions
            raise TextmillError(f"GPT-J rotary_dim {rotary_dim} cannot be expressed as a share of the head's {hidden // heads}")
        return config


LLAMA_NAMES = dict(
    hf_layer="model.layers.{}.", hf_embedding="model.embed_tokens.weight", hf_qkv="self_attn.{}_proj",
    hf_globals=(("norm_f.weight", "model.norm.weight"),),
    hf_layers=(("attn.proj.weight", "self_attn.o_proj.weight", False),
               ("mlp.gate.weight", "mlp.gate_proj.weight", False), ("mlp.fc1.weight", "mlp.up_proj.weight", False),
               ("mlp.fc2.weight", "mlp.down_proj.weight", False), ("norm1.weight", "input_layernorm.weight", False),
               ("norm2.weight", "post_attention_layernorm.weight", False)))

# In the order an export looks for a model's family (a LLaMA shape is LLaMA's unless imported as another's).
FAMILIES = {f.model_type: f for f in (
    GPT2(
        "gpt2", "GPT-2", "GPT2LMHeadModel", hf_layer="transformer.h.{}.", hf_embedding="transformer.wte.weight",
        hf_globals=(("wpe.weight", "transformer.wpe.weight"), ("norm_f.weight", "transformer.ln_f.weight"),
                    ("norm_f.bias", "transformer.ln_f.bias")),
        hf_layers=with_bias((("norm1", "ln_1"), ("norm2", "ln_2"))) + (
            ("attn.proj.weight", "attn.c_proj.weight", True), ("attn.proj.bias", "attn.c_proj.bias", False),
            ("mlp.fc1.weight", "mlp.c_fc.weight", True), ("mlp.fc1.bias", "mlp.c_fc.bias", False),
            ("mlp.fc2.weight", "mlp.c_proj.weight", True), ("mlp.fc2.bias", "mlp.c_proj.bias", False)),
        megatron_block={"norm1": "input_layernorm", "attn.qkv": "self_attention.query_key_value",
                        "attn.proj": "self_attention.dense", "norm2": "post_attention_layernorm",
                        "mlp.fc1": "mlp.dense_h_to_4h", "mlp.fc2": "mlp.dense_4h_to_h"},
        megatron_final_norm="final_layernorm",
        megatron_core_block={"norm1": "input_layernorm", "attn.qkv": "self_attention.linear_qkv",
                             "attn.proj": "self_attention.linear_proj", "norm2": "pre_mlp_layernorm",
                             "mlp.fc1": "mlp.linear_fc1", "mlp.fc2": "mlp.linear_fc2"},
        megatron_core_fused_norms={"norm1": "self_attention.linear_qkv.layer_norm", "norm2": "mlp.linear_fc1.layer_norm"}),
    Llama("llama", "LLaMA", "LlamaForCausalLM", **LLAMA_NAMES),
    Mistral("mistral", "Mistral", "MistralForCausalLM", **LLAMA_NAMES),
    Qwen2("qwen2", "Qwen2", "Qwen2ForCausalLM", **LLAMA_NAMES),
    GPTNeoX(
        "gpt_neox", "GPT-NeoX", "GPTNeoXForCausalLM", hf_layer="gpt_neox.layers.{}.", hf_embedding="gpt_neox.embed_in.weight",
        hf_output="embed_out.weight",
        hf_globals=(("norm_f.weight", "gpt_neox.final_layer_norm.weight"), ("norm_f.bias", "gpt_neox.final_layer_norm.bias")),
        hf_layers=with_bias((("norm1", "input_layernorm"), ("norm2", "post_attention_layernorm"),
                             ("attn.qkv", "attention.query_key_value"), ("attn.proj", "attention.dense"),
                             ("mlp.fc1", "mlp.dense_h_to_4h"), ("mlp.fc2", "mlp.dense_4h_to_h")))),
    GPTJ(
        "gptj", "GPT-J", "GPTJForCausalLM", hf_layer="transformer.h.{}.", hf_embedding="transformer.wte.weight",
        hf_qkv="attn.{}_proj",
        hf_globals=(("norm_f.weight", "transformer.ln_f.weight"), ("norm_f.bias", "transformer.ln_f.bias")),
        hf_layers=with_bias((("norm1", "ln_1"), ("mlp.fc1", "mlp.fc_in"), ("mlp.fc2", "mlp.fc_out"))) + (
            ("attn.proj.weight", "attn.out_proj.weight", False),)),
)}


def hf_family(c: GPTConfig) -> Family:
    """The family whose Hugging Face class holds this model: the one it was imported as while it fits, else the
    first that fits; one error line when none does."""
    if c.family in FAMILIES and FAMILIES[c.family].matches(c):
        return FAMILIES[c.family]
    for family in FAMILIES.values():
        if family.matches(c):
            return family
    raise TextmillError(
        f"no Hugging Face class has this block (positions {c.position_embedding}, norm {c.normalization}, activation "
        f"{c.activation}, bias {c.bias}, parallel residual {c.parallel_residual}); export needs GPT-2's (learned, "
        "layernorm, gelu, biases), LLaMA's or Mistral's (rope, rmsnorm, swiglu, no biases), Qwen2's (LLaMA's with "
        "a QKV bias), GPT-NeoX's (rope, layernorm, gelu, biases, untied) or GPT-J's (interleaved rope with base 10000, "
        "one layernorm, tanh gelu, parallel residual, no attention biases, a biased untied output layer)")
