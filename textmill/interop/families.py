"""Each model family's tensor names in every format textmill reads and writes, in one place: adding a format
or a family touches this file, not every converter (as transformers keeps one converter per model).

Names are textmill's (the keys of `GPT.state_dict()`, blocks as `blocks.N.`) against the format's, read in
both directions. The fused attention projection is the one tensor that is not a rename in Hugging Face's
formats (interop/hf.py splits or reorders it); Megatron-LM's is a rename in its current order (version 2.0
and later, textmill's), and interop/megatron.py reorders older versions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FamilyNames:
    # Hugging Face transformers: block prefix ("{}" the layer), token embedding, the other global tensors
    # (ours, theirs), the blocks' tensors (ours, theirs, transposed: GPT-2's Conv1D keeps [in, out]), the
    # separate q/k/v projections where the family has them ("{}" is q, k or v), and the output layer.
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


def with_bias(pairs: tuple[tuple[str, str], ...], transposed: bool = False) -> tuple[tuple[str, str, bool], ...]:
    """Module name pairs as (ours, theirs, transposed) for their weight and bias."""
    return tuple((f"{ours}.{p}", f"{theirs}.{p}", transposed) for ours, theirs in pairs for p in ("weight", "bias"))


FAMILIES = {
    "gpt2": FamilyNames(
        hf_layer="transformer.h.{}.", hf_embedding="transformer.wte.weight",
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
    "llama": FamilyNames(
        hf_layer="model.layers.{}.", hf_embedding="model.embed_tokens.weight", hf_qkv="self_attn.{}_proj.weight",
        hf_globals=(("norm_f.weight", "model.norm.weight"),),
        hf_layers=(("attn.proj.weight", "self_attn.o_proj.weight", False),
                   ("mlp.gate.weight", "mlp.gate_proj.weight", False), ("mlp.fc1.weight", "mlp.up_proj.weight", False),
                   ("mlp.fc2.weight", "mlp.down_proj.weight", False), ("norm1.weight", "input_layernorm.weight", False),
                   ("norm2.weight", "post_attention_layernorm.weight", False))),
    # GPT-NeoX fuses QKV in textmill's own per-head layout, [heads, (q, k, v), head_dim]: a rename too.
    "gpt_neox": FamilyNames(
        hf_layer="gpt_neox.layers.{}.", hf_embedding="gpt_neox.embed_in.weight", hf_output="embed_out.weight",
        hf_globals=(("norm_f.weight", "gpt_neox.final_layer_norm.weight"), ("norm_f.bias", "gpt_neox.final_layer_norm.bias")),
        hf_layers=with_bias((("norm1", "input_layernorm"), ("norm2", "post_attention_layernorm"),
                             ("attn.qkv", "attention.query_key_value"), ("attn.proj", "attention.dense"),
                             ("mlp.fc1", "mlp.dense_h_to_4h"), ("mlp.fc2", "mlp.dense_4h_to_h")))),
    # GPT-J: separate Q, K, V as LLaMA, one norm per block, and a bias on the output layer.
    "gptj": FamilyNames(
        hf_layer="transformer.h.{}.", hf_embedding="transformer.wte.weight", hf_qkv="attn.{}_proj.weight",
        hf_globals=(("norm_f.weight", "transformer.ln_f.weight"), ("norm_f.bias", "transformer.ln_f.bias")),
        hf_layers=with_bias((("norm1", "ln_1"), ("mlp.fc1", "mlp.fc_in"), ("mlp.fc2", "mlp.fc_out"))) + (
            ("attn.proj.weight", "attn.out_proj.weight", False),)),
}
