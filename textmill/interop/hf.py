"""Hugging Face folders to and from textmill checkpoints, without importing transformers.

Export writes what `AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained` read:
config.json, model.safetensors (fp32) and the tokenizer's files (vocab.json, merges.txt,
tokenizer_config.json and special_tokens_map.json for GPT-2 BPE; a Hugging Face tokenizer's own). A
GPT-2 model becomes `GPT2LMHeadModel`, a LLaMA-style one (RoPE, RMSNorm, SwiGLU, no biases)
`LlamaForCausalLM`, a GPT-NeoX one (partial RoPE, LayerNorm, GELU, biases, untied output, parallel residual
or not) `GPTNeoXForCausalLM`, a GPT-J one (partial interleaved RoPE, one LayerNorm per block, tanh GELU, parallel
residual, no attention biases, untied output with a bias) `GPTJForCausalLM`; other mixtures have no Hugging
Face class and are refused.

The one real transformation is attention's fused projection. textmill (like Megatron since checkpoint
version 2.0) groups its rows per query group, [groups, (queries, k, v), head_dim] ([heads, (q, k, v),
head_dim] without grouped-query attention); GPT-2 wants [Q all heads; K all heads; V all heads], stored
transposed because its `Conv1D` keeps [in, out]; LLaMA and GPT-J want three separate matrices, K and V with
num_key_value_heads heads (docs/REFERENCE.md section 7.3). LLaMA 3.1's rope scaling (rope_type "llama3")
comes in and goes out with its four numbers. A folder with a tokenizer.json brings it along as it is (the
model's own tokenizer, kept in the checkpoint's tokenizer/), else GPT-2's vocab.json and merges.txt. The embedding keeps only the real
vocabulary's rows on export and gets Megatron's padding back, as zero rows, on import.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from textmill.errors import TextmillError
from textmill.io.files import atomic_folder
from textmill.tokenizers.gpt2 import EOD_TOKEN, padded_vocab_size
from textmill.interop.families import FAMILIES
from textmill.interop.release import checked_model, save_release
from textmill.trainer.checkpoint import checkpoint_tokenizer, load_model
from textmill.trainer.gpt_config import GPTConfig

GPT2_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new"}
# Hugging Face names of the tanh-approximated GELU (the same function up to rounding).
HF_TANH_GELUS = ("gelu_new", "gelu_fast", "gelu_pytorch_tanh")


def hf_family(model_config: GPTConfig) -> str:
    c = model_config
    # What only GPT-J's blocks do, and what GPT-NeoX's add to a plain block.
    gptj_only = (c.rotary_interleaved, c.shared_input_norm, c.output_bias, c.attention_bias != c.bias)
    plain = not c.parallel_residual and c.rotary_percent == 1 and not any(gptj_only)
    gpt2 = (c.position_embedding, c.normalization, c.activation in GPT2_ACTIVATIONS, c.bias, c.kv_heads == c.num_attention_heads)
    if gpt2 == ("learned", "layernorm", True, True, True) and plain:
        return "gpt2"
    if (c.position_embedding, c.normalization, c.activation, c.bias) == ("rope", "rmsnorm", "swiglu", False) and plain:
        return "llama"
    rope_layernorm = (c.position_embedding, c.normalization, c.bias, c.tie_embeddings, c.kv_heads == c.num_attention_heads,
                      c.rope_scaling) == ("rope", "layernorm", True, False, True, "none")
    if rope_layernorm and c.activation == "gelu" and not any(gptj_only):
        return "gpt_neox"
    if rope_layernorm and c.activation == "gelu_tanh" and all(gptj_only) and c.parallel_residual and c.rope_theta == 10000:
        return "gptj"
    raise TextmillError(
        f"no Hugging Face class has this block (positions {c.position_embedding}, norm {c.normalization}, activation "
        f"{c.activation}, bias {c.bias}, parallel residual {c.parallel_residual}); export needs GPT-2's (learned, "
        "layernorm, gelu, biases), LLaMA's (rope, rmsnorm, swiglu, no biases), GPT-NeoX's (rope, layernorm, gelu, "
        "biases, untied) or GPT-J's (interleaved rope with base 10000, one layernorm, tanh gelu, parallel residual, "
        "no attention biases, a biased untied output layer)"
    )


def split_qkv(w: torch.Tensor, model_config: GPTConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows grouped per query group, [groups, (queries, k, v), head_dim, ...] -> Q [heads * head_dim, ...],
    K and V [groups * head_dim, ...] (every head its own group without grouped-query attention)."""
    groups, queries = model_config.kv_heads, model_config.num_attention_heads // model_config.kv_heads
    grouped = w.reshape(groups, queries + 2, model_config.head_dim, *w.shape[1:])
    return (grouped[:, :queries].reshape(-1, *w.shape[1:]), grouped[:, queries].reshape(-1, *w.shape[1:]),
            grouped[:, queries + 1].reshape(-1, *w.shape[1:]))


def join_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, model_config: GPTConfig) -> torch.Tensor:
    """Inverse of split_qkv."""
    groups, head_dim = model_config.kv_heads, model_config.head_dim
    parts = [q.reshape(groups, -1, head_dim, *q.shape[1:]), k.reshape(groups, 1, head_dim, *k.shape[1:]),
             v.reshape(groups, 1, head_dim, *v.shape[1:])]
    return torch.cat(parts, dim=1).reshape(-1, *q.shape[1:])


def qkv_to_hf(family: str, layer: dict, model_config: GPTConfig) -> dict:
    """One block's fused projection (our names, without the block prefix) in Hugging Face's form."""
    if family == "gpt_neox":
        return {}  # renamed with the other layers
    if family == "gpt2":
        return {"attn.c_attn.weight": torch.cat(split_qkv(layer["attn.qkv.weight"], model_config)).t(),
                "attn.c_attn.bias": torch.cat(split_qkv(layer["attn.qkv.bias"], model_config))}
    names = FAMILIES[family].hf_qkv
    return dict(zip((names.format(p) for p in "qkv"), split_qkv(layer["attn.qkv.weight"], model_config)))


def qkv_from_hf(family: str, layer: dict, model_config: GPTConfig) -> dict:
    """Inverse of qkv_to_hf."""
    if family == "gpt_neox":
        return {}
    if family == "gpt2":
        return {"attn.qkv.weight": join_qkv(*layer["attn.c_attn.weight"].t().chunk(3), model_config),
                "attn.qkv.bias": join_qkv(*layer["attn.c_attn.bias"].chunk(3), model_config)}
    names = FAMILIES[family].hf_qkv
    return {"attn.qkv.weight": join_qkv(*(layer[names.format(p)] for p in "qkv"), model_config)}


def block(state: dict, prefix: str) -> dict:
    return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}


# ----------------------------------------------------------------------------------------------- export
def to_hf_state(family: str, ours: dict, model_config: GPTConfig, vocab: int) -> dict:
    names = FAMILIES[family]
    hf = {names.hf_embedding: ours["wte.weight"][:vocab], **{theirs: ours[o] for o, theirs in names.hf_globals}}
    for i in range(model_config.num_layers):
        o, h = f"blocks.{i}.", names.hf_layer.format(i)
        for a, b, transposed in names.hf_layers:
            hf[h + b] = ours[o + a].t() if transposed else ours[o + a]
        hf.update({h + k: v for k, v in qkv_to_hf(family, block(ours, o), model_config).items()})
    if not model_config.tie_embeddings:
        hf[names.hf_output] = ours["lm_head.weight"][:vocab]
    if model_config.output_bias:
        hf["lm_head.bias"] = ours["lm_head.bias"][:vocab]
    return hf


def hf_rope(model_config: GPTConfig) -> dict:
    """LLaMA's rope parameters as transformers names them."""
    if model_config.rope_scaling == "none":
        return {"rope_type": "default", "rope_theta": model_config.rope_theta}
    return {"rope_type": "llama3", "rope_theta": model_config.rope_theta, "factor": model_config.rope_scaling_factor,
            "low_freq_factor": model_config.rope_low_freq_factor, "high_freq_factor": model_config.rope_high_freq_factor,
            "original_max_position_embeddings": model_config.rope_original_max_positions}


def hf_config(model_config: GPTConfig, family: str, vocab: int, eod: int, bos: int | None = None) -> dict:
    common = {"vocab_size": vocab, "bos_token_id": eod if bos is None else bos, "eos_token_id": eod, "tie_word_embeddings": model_config.tie_embeddings,
              "initializer_range": model_config.init_std, "torch_dtype": "float32", "dtype": "float32"}
    if family == "gpt2":
        return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_positions": model_config.max_position_embeddings,
                "n_embd": model_config.hidden_size, "n_layer": model_config.num_layers, "n_head": model_config.num_attention_heads,
                "n_inner": model_config.ffn_hidden_size, "activation_function": GPT2_ACTIVATIONS[model_config.activation],
                "layer_norm_epsilon": model_config.norm_epsilon, "resid_pdrop": model_config.hidden_dropout, "embd_pdrop": model_config.hidden_dropout,
                "attn_pdrop": model_config.attention_dropout, "scale_attn_weights": True, **common}
    if family == "gpt_neox":
        return {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "hidden_size": model_config.hidden_size,
                "intermediate_size": model_config.ffn_hidden_size, "num_hidden_layers": model_config.num_layers,
                "num_attention_heads": model_config.num_attention_heads, "hidden_act": "gelu",
                "max_position_embeddings": model_config.max_position_embeddings, "layer_norm_eps": model_config.norm_epsilon,
                "use_parallel_residual": model_config.parallel_residual, "attention_bias": True,
                "rotary_pct": model_config.rotary_percent, "rotary_emb_base": model_config.rope_theta,
                "rope_parameters": {"rope_type": "default", "rope_theta": model_config.rope_theta,
                                    "partial_rotary_factor": model_config.rotary_percent},
                "hidden_dropout": model_config.hidden_dropout, "attention_dropout": model_config.attention_dropout, **common}
    if family == "gptj":
        return {"model_type": "gptj", "architectures": ["GPTJForCausalLM"], "n_positions": model_config.max_position_embeddings,
                "n_embd": model_config.hidden_size, "n_layer": model_config.num_layers, "n_head": model_config.num_attention_heads,
                "n_inner": model_config.ffn_hidden_size, "rotary_dim": model_config.rotary_dim, "activation_function": "gelu_new",
                "layer_norm_epsilon": model_config.norm_epsilon, "resid_pdrop": model_config.hidden_dropout,
                "embd_pdrop": model_config.hidden_dropout, "attn_pdrop": model_config.attention_dropout, **common}
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": model_config.hidden_size,
            "intermediate_size": model_config.ffn_hidden_size, "num_hidden_layers": model_config.num_layers,
            "num_attention_heads": model_config.num_attention_heads, "num_key_value_heads": model_config.kv_heads,
            "head_dim": model_config.head_dim, "hidden_act": "silu", "max_position_embeddings": model_config.max_position_embeddings,
            "rms_norm_eps": model_config.norm_epsilon, "rope_theta": model_config.rope_theta,
            "rope_parameters": hf_rope(model_config), "rope_scaling": hf_rope(model_config),
            "attention_bias": False, "mlp_bias": False, "attention_dropout": model_config.attention_dropout, **common}


def write_tokenizer(tokenizer, max_length: int, out: Path) -> None:
    """The model's tokenizer beside it: a Hugging Face tokenizer's own files as they are, or GPT-2's two
    files with the config transformers' GPT2Tokenizer reads."""
    from textmill.tokenizers.files import folder_files
    from textmill.tokenizers.hf import HFTokenizer

    for name, path in folder_files(tokenizer).items():
        shutil.copyfile(path, out / name)
    if isinstance(tokenizer, HFTokenizer):
        return
    special = {"bos_token": EOD_TOKEN, "eos_token": EOD_TOKEN, "unk_token": EOD_TOKEN}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": max_length, "add_prefix_space": False, **special}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def export_hf(load: Path, output: Path, vocab_file=None, merge_file=None) -> dict:
    """Write the newest checkpoint under `load` as a Hugging Face model folder at `output`."""
    from safetensors.torch import save_file

    model, ckpt = load_model(load)
    tokenizer = checkpoint_tokenizer(load, ckpt.meta, vocab_file, merge_file)
    model_config = model.config
    family = hf_family(model_config)
    ours = model.state_dict()
    vocab = ckpt.meta.get("vocab_size", tokenizer.vocab_size)  # the model's rows (a tokenizer may hold fewer)
    tensors = to_hf_state(family, ours, model_config, vocab)
    output = Path(output)
    with atomic_folder(output) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, tmp / "model.safetensors", metadata={"format": "pt"})
        config = hf_config(model_config, family, vocab, tokenizer.eod, getattr(tokenizer, "bos", None))
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        write_tokenizer(tokenizer, model_config.max_position_embeddings, tmp)
    return {"family": family, "parameters": sum(t.numel() for t in tensors.values()), "vocab_size": vocab,
            "iteration": "release" if ckpt.release else ckpt.meta["iteration"], "output": str(output)}


# ----------------------------------------------------------------------------------------------- import
def load_safetensors(path: Path) -> dict:
    """A safetensors file's tensors, or one error line when its header lies (offsets past the end,
    overlapping or missing tensors), it is cut short, or it is not safetensors at all."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError) as exc:
        raise TextmillError(f"{path}: not a readable safetensors file ({str(exc).strip().splitlines()[-1][:200]})") from None


def read_hf_weights(folder: Path) -> dict:
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.exists():
        return load_safetensors(single)
    if index.exists():
        try:
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            outside = [f for f in files if Path(f).name != f or f in ("", ".", "..")]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise TextmillError(f"{index}: not a safetensors index (a JSON object with a weight_map of file names)") from None
        if outside:  # a shard is a file beside its index, never a path elsewhere (`../outside/x.safetensors`)
            raise TextmillError(f"{index}: names {outside[0][:80]!r}, not a file of its folder")
        return {k: v for f in files for k, v in load_safetensors(folder / f).items()}
    if (folder / "pytorch_model.bin").exists():
        try:  # weights_only: a pickle that would run code is refused, never run
            return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises several types for refused, truncated or foreign files
            raise TextmillError(f"{folder / 'pytorch_model.bin'}: refused or unreadable ({type(exc).__name__}: "
                                f"{str(exc).strip().splitlines()[-1][:200]})") from None
    raise TextmillError(f"{folder}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")


def config_from_hf(hf: dict, padded_vocab: int) -> GPTConfig:
    kind = hf.get("model_type")
    if kind == "gpt2":
        act = hf.get("activation_function", "gelu_new")
        if act not in ("gelu", *HF_TANH_GELUS):
            raise TextmillError(f"GPT-2 activation {act!r} is not supported (gelu or a tanh GELU)")
        for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
            if hf.get(flag):
                raise TextmillError(f"GPT-2 option {flag} is not supported")
        return GPTConfig(vocab_size=padded_vocab, num_layers=hf["n_layer"], hidden_size=hf["n_embd"],
                         num_attention_heads=hf["n_head"], max_position_embeddings=hf["n_positions"],
                         ffn_hidden_size=hf.get("n_inner"), activation="gelu" if act == "gelu" else "gelu_tanh",
                         norm_epsilon=hf.get("layer_norm_epsilon", 1e-5), tie_embeddings=hf.get("tie_word_embeddings", True),
                         hidden_dropout=hf.get("resid_pdrop", 0.1), attention_dropout=hf.get("attn_pdrop", 0.1),
                         init_std=hf.get("initializer_range", 0.02))
    if kind == "llama":
        heads = hf["num_attention_heads"]
        rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        problems = [f"head_dim {hf['head_dim']} != hidden / heads" if hf.get("head_dim", hf["hidden_size"] // heads) * heads != hf["hidden_size"] else "",
                    f"rope type {rope_type!r} (default or llama3)" if rope_type not in ("default", "llama3") else "",
                    "attention or MLP biases" if hf.get("attention_bias") or hf.get("mlp_bias") else "",
                    f"activation {hf.get('hidden_act')!r}" if hf.get("hidden_act", "silu") != "silu" else ""]
        problems = [p for p in problems if p]
        if problems:
            raise TextmillError("this LLaMA model uses what textmill's blocks do not have: " + "; ".join(problems))
        return GPTConfig(vocab_size=padded_vocab, num_layers=hf["num_hidden_layers"], hidden_size=hf["hidden_size"],
                         num_attention_heads=heads, max_position_embeddings=hf["max_position_embeddings"],
                         ffn_hidden_size=hf["intermediate_size"], position_embedding="rope", normalization="rmsnorm",
                         activation="swiglu", bias=False, norm_epsilon=hf.get("rms_norm_eps", 1e-6),
                         rope_theta=rope.get("rope_theta", hf.get("rope_theta", 10000.0)),
                         num_query_groups=hf.get("num_key_value_heads", heads),
                         **({} if rope_type == "default" else dict(
                             rope_scaling="llama3", rope_scaling_factor=rope["factor"],
                             rope_low_freq_factor=rope["low_freq_factor"], rope_high_freq_factor=rope["high_freq_factor"],
                             rope_original_max_positions=rope["original_max_position_embeddings"])),
                         tie_embeddings=hf.get("tie_word_embeddings", False), hidden_dropout=0.0,
                         attention_dropout=hf.get("attention_dropout", 0.0), init_std=hf.get("initializer_range", 0.02))
    if kind == "gpt_neox":
        rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
        problems = [f"rope type {rope.get('rope_type')!r}" if rope.get("rope_type", "default") != "default" else "",
                    f"activation {hf.get('hidden_act')!r}" if hf.get("hidden_act", "gelu") != "gelu" else "",
                    "no attention biases" if not hf.get("attention_bias", True) else "",
                    "tied input and output embeddings" if hf.get("tie_word_embeddings") else ""]
        problems = [p for p in problems if p]
        if problems:
            raise TextmillError("this GPT-NeoX model uses what textmill's blocks do not have: " + "; ".join(problems))
        return GPTConfig(vocab_size=padded_vocab, num_layers=hf["num_hidden_layers"], hidden_size=hf["hidden_size"],
                         num_attention_heads=hf["num_attention_heads"], max_position_embeddings=hf["max_position_embeddings"],
                         ffn_hidden_size=hf["intermediate_size"], position_embedding="rope", normalization="layernorm",
                         activation="gelu", bias=True, tie_embeddings=False, norm_epsilon=hf.get("layer_norm_eps", 1e-5),
                         rope_theta=rope.get("rope_theta", hf.get("rotary_emb_base", 10000.0)),
                         rotary_percent=rope.get("partial_rotary_factor", hf.get("rotary_pct", 1.0)),
                         parallel_residual=hf.get("use_parallel_residual", True),
                         hidden_dropout=hf.get("hidden_dropout", 0.0), attention_dropout=hf.get("attention_dropout", 0.0),
                         init_std=hf.get("initializer_range", 0.02))
    if kind == "gptj":
        heads, hidden = hf["n_head"], hf["n_embd"]
        rotary_dim = hf.get("rotary_dim")
        act = hf.get("activation_function", "gelu_new")
        problems = [f"activation {act!r} (a tanh GELU)" if act not in HF_TANH_GELUS else "",
                    "tied input and output embeddings" if hf.get("tie_word_embeddings") else "",
                    f"rotary_dim {rotary_dim!r} (an even number of dimensions up to the head's {hidden // heads})"
                    if not isinstance(rotary_dim, int) or rotary_dim % 2 or not 0 < rotary_dim <= hidden // heads else ""]
        problems = [p for p in problems if p]
        if problems:
            raise TextmillError("this GPT-J model uses what textmill's blocks do not have: " + "; ".join(problems))
        config = GPTConfig(vocab_size=padded_vocab, num_layers=hf["n_layer"], hidden_size=hidden, num_attention_heads=heads,
                           max_position_embeddings=hf["n_positions"], ffn_hidden_size=hf.get("n_inner"),
                           position_embedding="rope", rotary_percent=rotary_dim / (hidden // heads), rotary_interleaved=True,
                           normalization="layernorm", activation="gelu_tanh", bias=True, attention_bias=False,
                           parallel_residual=True, shared_input_norm=True, tie_embeddings=False, output_bias=True,
                           norm_epsilon=hf.get("layer_norm_epsilon", 1e-5), hidden_dropout=hf.get("resid_pdrop", 0.0),
                           attention_dropout=hf.get("attn_pdrop", 0.0), init_std=hf.get("initializer_range", 0.02))
        if config.rotary_dim != rotary_dim:  # the share must give back the same count of dimensions
            raise TextmillError(f"GPT-J rotary_dim {rotary_dim} cannot be expressed as a share of the head's {hidden // heads}")
        return config
    raise TextmillError(f"model_type {kind!r} cannot be imported (gpt2, llama, gpt_neox or gptj)")


def padded_rows(w: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.cat([w, w.new_zeros(rows - w.shape[0], *w.shape[1:])])


def from_hf_state(family: str, hf: dict, model_config: GPTConfig) -> dict:
    names = FAMILIES[family]
    ours = {"wte.weight": padded_rows(hf[names.hf_embedding], model_config.vocab_size),
            **{o: hf[theirs] for o, theirs in names.hf_globals}}
    for i in range(model_config.num_layers):
        o, h = f"blocks.{i}.", names.hf_layer.format(i)
        for a, b, transposed in names.hf_layers:
            ours[o + a] = hf[h + b].t() if transposed else hf[h + b]
        ours.update({o + k: v for k, v in qkv_from_hf(family, block(hf, h), model_config).items()})
    if not model_config.tie_embeddings:
        ours["lm_head.weight"] = padded_rows(hf[names.hf_output], model_config.vocab_size)
    if model_config.output_bias:  # padding rows get a zero bias, as they get zero weights
        ours["lm_head.bias"] = padded_rows(hf["lm_head.bias"], model_config.vocab_size)
    return ours


def import_hf(folder: Path, save: Path, divisible_by: int = 128, vocab_file=None, merge_file=None) -> dict:
    """Turn a Hugging Face GPT-2, LLaMA, GPT-NeoX or GPT-J folder into a textmill `release` checkpoint under `save`, with its
    tokenizer files (from the folder, or the ones given) in `<save>/tokenizer/`."""
    from textmill.tokenizers.files import open_tokenizer
    from textmill.tokenizers.hf import is_hf_tokenizer_folder

    folder = Path(folder)
    try:
        hf = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TextmillError(f"{folder}/config.json: {exc}") from None
    if not isinstance(hf, dict) or not isinstance(hf.get("vocab_size"), int) or not isinstance(hf.get("model_type"), str):
        raise TextmillError(f"{folder}/config.json: not a Hugging Face model config (it needs at least model_type and "
                            "vocab_size)")
    vocab = hf["vocab_size"]
    try:
        model_config = config_from_hf(hf, padded_vocab_size(vocab, divisible_by))
    except KeyError as exc:
        raise TextmillError(f"{folder}/config.json: malformed, it has no {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise TextmillError(f"{folder}/config.json: malformed ({exc})") from None
    weights = {k: v.float() for k, v in read_hf_weights(folder).items()}
    if hf["model_type"] == "gpt2":  # OpenAI's own GPT-2 files name the tensors without "transformer."
        weights = {k if k.startswith(("transformer.", "lm_head.")) else "transformer." + k: v for k, v in weights.items()}
    if model_config.tie_embeddings:
        weights.pop("lm_head.weight", None)
    try:
        ours = from_hf_state(hf["model_type"], weights, model_config)
    except KeyError as exc:
        raise TextmillError(f"{folder}: weights do not match config.json (KeyError: {str(exc)[:300]})") from None
    model = checked_model(model_config, ours, folder)
    if vocab_file or not is_hf_tokenizer_folder(folder):  # GPT-2's two files
        vocab_file = Path(vocab_file) if vocab_file else folder / "vocab.json"
        merge_file = Path(merge_file) if merge_file else folder / "merges.txt"
        if not vocab_file.exists() or not merge_file.exists():
            raise TextmillError(f"{folder} holds no tokenizer.json, nor vocab.json + merges.txt (GPT-2 BPE); give "
                                "--vocab-file and --merge-file")
        tokenizer = open_tokenizer(vocab_file, merge_file)
    else:  # the model's own Hugging Face tokenizer, kept as it is
        tokenizer = open_tokenizer(tokenizer_model=folder)
    save_release(save, model, tokenizer, vocab, folder)
    return {"family": hf["model_type"], "parameters": model.num_parameters(), "vocab_size": vocab,
            "padded_vocab_size": model_config.vocab_size, "output": str(save)}
