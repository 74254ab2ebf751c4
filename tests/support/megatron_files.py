"""Megatron-LM legacy GPT checkpoints written here from a transformers GPT-2, as Megatron-LM lays them out
(docs/REFERENCE.md section 7): written independently of textmill's reader, from Megatron's conventions, so
the import is checked against them and not against itself."""

import argparse
import random

import numpy as np
import torch


def qkv_rows(c_attn: torch.Tensor, heads: int, version: float) -> torch.Tensor:
    """transformers' c_attn ([in, (Q all heads; K; V)] or its bias) as Megatron's fused rows of `version`,
    shaped [3 or heads, ...]: version 0 [(q, k, v), heads, head_dim], 1.0 [heads, head_dim, (q, k, v)],
    2.0+ [heads, (q, k, v), head_dim]."""
    rows = c_attn.t() if c_attn.ndim == 2 else c_attn  # Conv1D keeps [in, out]
    tail = rows.shape[1:]
    qkv_heads = rows.reshape(3, heads, -1, *tail)  # [(q, k, v), heads, head_dim, ...]
    if version == 0:
        return qkv_heads
    if version == 1.0:
        return qkv_heads.permute(1, 2, 0, *range(3, qkv_heads.ndim))
    return qkv_heads.transpose(0, 1)


def shard_qkv(grouped: torch.Tensor, version: float, tp: int, rank: int) -> torch.Tensor:
    """A tensor-parallel rank's rows: its heads, in the version's order."""
    dim = 1 if version == 0 else 0  # the heads' dimension
    return grouped.chunk(tp, dim=dim)[rank].reshape(-1, *grouped.shape[3:]).clone()


def write_megatron(root, hf_model, version: float, tp: int = 1, pp: int = 1, with_args: bool = True,
                   release: bool = False, dtype=torch.float32, vocab_multiple: int = 128, names: str = "legacy"):
    """`hf_model` (a transformers GPT2LMHeadModel) as a Megatron-LM checkpoint under `root`, with the legacy
    model's names, or (`names` "core", "core-te", version 3.0) Megatron-core's GPTModel's, local or with
    Transformer Engine's layers (norms fused into the next linear layer, `_extra_state` entries)."""
    config, hf = hf_model.config, {k: v.detach() for k, v in hf_model.state_dict().items()}
    heads, layers = config.n_head, config.n_layer
    padded = -(-config.vocab_size // (vocab_multiple * tp)) * vocab_multiple * tp
    words = torch.cat([hf["transformer.wte.weight"], torch.zeros(padded - config.vocab_size, config.n_embd)])
    attention, body_name = ("attention", "transformer") if version < 3.0 else ("self_attention", "encoder")
    args = argparse.Namespace(
        num_layers=layers, hidden_size=config.n_embd, num_attention_heads=heads, ffn_hidden_size=4 * config.n_embd,
        max_position_embeddings=config.n_positions, seq_length=config.n_positions, padded_vocab_size=padded,
        make_vocab_size_divisible_by=vocab_multiple, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        bias_gelu_fusion=True, openai_gelu=False, layernorm_epsilon=config.layer_norm_epsilon, fp16=dtype == torch.float16,
        params_dtype=dtype, hidden_dropout=0.1, attention_dropout=0.1, tokenizer_type="GPT2BPETokenizer")
    folder = root / ("release" if release else "iter_0000010")
    per_stage = layers // pp
    for p in range(pp):
        for t in range(tp):
            body = {}
            for local in range(per_stage):
                h = f"transformer.h.{p * per_stage + local}."
                m = f"layers.{local}."
                body[m + "input_layernorm.weight"], body[m + "input_layernorm.bias"] = hf[h + "ln_1.weight"], hf[h + "ln_1.bias"]
                for kind in ("weight", "bias"):
                    rows = qkv_rows(hf[h + f"attn.c_attn.{kind}"], heads, version)
                    body[m + f"{attention}.query_key_value.{kind}"] = shard_qkv(rows, version, tp, t)
                body[m + f"{attention}.dense.weight"] = hf[h + "attn.c_proj.weight"].t().chunk(tp, dim=1)[t]
                body[m + f"{attention}.dense.bias"] = hf[h + "attn.c_proj.bias"]
                for kind in ("weight", "bias"):
                    body[m + f"post_attention_layernorm.{kind}"] = hf[h + f"ln_2.{kind}"]
                body[m + "mlp.dense_h_to_4h.weight"] = hf[h + "mlp.c_fc.weight"].t().chunk(tp, dim=0)[t]
                body[m + "mlp.dense_h_to_4h.bias"] = hf[h + "mlp.c_fc.bias"].chunk(tp, dim=0)[t]
                body[m + "mlp.dense_4h_to_h.weight"] = hf[h + "mlp.c_proj.weight"].t().chunk(tp, dim=1)[t]
                body[m + "mlp.dense_4h_to_h.bias"] = hf[h + "mlp.c_proj.bias"]
            language_model = {body_name: body}
            model = {"language_model": language_model}
            if p == 0:
                language_model["embedding"] = {"word_embeddings": {"weight": words.chunk(tp)[t]},
                                               "position_embeddings": {"weight": hf["transformer.wpe.weight"]}}
            if p == pp - 1:
                for kind in ("weight", "bias"):
                    body[f"final_layernorm.{kind}"] = hf[f"transformer.ln_f.{kind}"]
                if pp > 1:  # the last stage's copy of the tied embedding, as Megatron keeps it
                    model["word_embeddings_for_head"] = {"weight": words.chunk(tp)[t]}
            model = to_dtype(model, dtype)
            if names != "legacy":
                model = core_names(model, te=names == "core-te")
            state = {"model": model, "iteration": 0 if release else 10}
            if version > 0:
                state["checkpoint_version"] = version
            if with_args:
                state["args"] = args
                state["optimizer"] = {"optimizer": {"state": {0: {"exp_avg": torch.zeros(3), "step": 10}},
                                                    "param_groups": [{"lr": 1e-4, "params": [0]}]},
                                      "fp32_from_fp16_params": [[torch.zeros(3)]], "loss_scaler": {"cur_scale": 4096.0}}
                state["rng_state"] = [{"random_rng_state": random.Random(0).getstate(),
                                       "np_rng_state": np.random.RandomState(0).get_state(),
                                       "torch_rng_state": torch.get_rng_state(), "rng_tracker_states": {}}]
            shard = folder / (f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else ""))
            shard.mkdir(parents=True)
            torch.save(state, shard / "model_optim_rng.pt")
    (root / "latest_checkpointed_iteration.txt").write_text("release" if release else "10")
    return root


CORE = {"input_layernorm": "input_layernorm", "self_attention.query_key_value": "self_attention.linear_qkv",
        "self_attention.dense": "self_attention.linear_proj", "post_attention_layernorm": "pre_mlp_layernorm",
        "mlp.dense_h_to_4h": "mlp.linear_fc1", "mlp.dense_4h_to_h": "mlp.linear_fc2"}
TE_FUSED_NORMS = {"input_layernorm": "self_attention.linear_qkv.layer_norm", "pre_mlp_layernorm": "mlp.linear_fc1.layer_norm"}


def core_names(model: dict, te: bool) -> dict:
    """A legacy model dict (version 3.0 names) under Megatron-core GPTModel's flat names."""
    import io

    flat = {}
    lm = model["language_model"]
    if "embedding" in lm:
        flat["embedding.word_embeddings.weight"] = lm["embedding"]["word_embeddings"]["weight"]
        flat["embedding.position_embeddings.weight"] = lm["embedding"]["position_embeddings"]["weight"]
    for name, tensor in lm["encoder"].items():
        if name.startswith("final_layernorm."):
            flat["decoder." + name] = tensor
            continue
        _, index, rest = name.split(".", 2)
        module, kind = rest.rsplit(".", 1)
        module = CORE[module]
        if te and module in TE_FUSED_NORMS:
            flat[f"decoder.layers.{index}.{TE_FUSED_NORMS[module]}_{kind}"] = tensor
        else:
            flat[f"decoder.layers.{index}.{module}.{kind}"] = tensor
            if te and kind == "weight":
                flat[f"decoder.layers.{index}.{module}._extra_state"] = io.BytesIO(b"fp8 metadata")
    if "word_embeddings_for_head" in model:  # the last stage's tied copy is the output layer's weight in core
        flat["output_layer.weight"] = model["word_embeddings_for_head"]["weight"]
    return flat


def to_dtype(tree, dtype):
    if isinstance(tree, dict):
        return {k: to_dtype(v, dtype) for k, v in tree.items()}
    return tree.to(dtype).clone()


# Megatron-core GPTModel's (local layers) module names -> textmill's, for what megatron_dist_writer.py saved.
CORE_TO_TEXTMILL = {"input_layernorm": "norm1", "self_attention.linear_qkv": "attn.qkv",
                    "self_attention.linear_proj": "attn.proj", "pre_mlp_layernorm": "norm2", "mlp.linear_fc1": "mlp.fc1",
                    "mlp.linear_fc2": "mlp.fc2"}
SPLIT_ROWS = ("word_embeddings.weight", "linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight", "linear_fc1.bias")
SPLIT_COLUMNS = ("linear_proj.weight", "linear_fc2.weight")


def megatron_core_whole(out, tp: int, pp: int) -> dict:
    """The whole model the TP x PP ranks of megatron_dist_writer.py held (their expected_tpT_ppP.pt files), in
    textmill's names: the tensor-parallel ranks' rows (column-parallel layers, the vocabulary) or columns
    (row-parallel layers) side by side, each stage's layers numbered after the previous stage's. The last
    stage's output layer is the tied word embedding, which textmill does not keep twice."""
    whole, offset = {}, 0
    for stage in range(pp):
        ranks = [torch.load(out / f"expected_tp{t}_pp{stage}.pt", weights_only=True) for t in range(tp)]
        layers = 0
        for name in ranks[0]:
            parts = [rank[name] for rank in ranks]
            tensor = (torch.cat(parts, 0) if name.endswith(SPLIT_ROWS) else torch.cat(parts, 1)
                      if name.endswith(SPLIT_COLUMNS) else parts[0])
            if name.startswith("decoder.layers."):
                _, _, index, rest = name.split(".", 3)
                module, kind = rest.rsplit(".", 1)
                whole[f"blocks.{offset + int(index)}.{CORE_TO_TEXTMILL[module]}.{kind}"] = tensor
                layers = max(layers, int(index) + 1)
            elif name.startswith("decoder.final_layernorm."):
                whole["norm_f." + name.rsplit(".", 1)[1]] = tensor
            elif name.startswith("embedding."):
                whole[{"word_embeddings": "wte", "position_embeddings": "wpe"}[name.split(".")[1]] + ".weight"] = tensor
        offset += layers
    return whole


def run_megatron_core(script: str, processes: int, *arguments) -> None:
    """`script` (a file beside this one) under torchrun, in `processes` processes (one per rank), given `arguments`."""
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(processes), str(Path(__file__).with_name(script)), *map(str, arguments)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def write_megatron_dist(out, tp: int = 1, pp: int = 1) -> dict:
    """A torch_dist checkpoint under `out`, written by Megatron-core in TP x PP processes
    (megatron_dist_writer.py), and the whole model its ranks held (megatron_core_whole)."""
    from pathlib import Path

    run_megatron_core("megatron_dist_writer.py", tp * pp, out, tp, pp)
    return megatron_core_whole(Path(out), tp, pp)


def load_with_megatron_core(folder, tp: int, pp: int, out) -> tuple[dict, dict | None]:
    """Megatron-core's GPTModel loads the iteration folder `folder` (either format) strictly in TP x PP processes
    (megatron_core_loader.py): the whole model its ranks then held, in textmill's names, and with one pipeline
    stage the logits it gave for fixed tokens ({"tokens", "logits"}). `out` holds what the ranks wrote."""
    from pathlib import Path

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    run_megatron_core("megatron_core_loader.py", tp * pp, folder, tp, pp, out)
    logits = torch.load(out / "logits.pt", weights_only=True) if pp == 1 else None
    return megatron_core_whole(out, tp, pp), logits


def hf_gpt2(bf16_exact: bool = False):
    """A random transformers GPT-2 (tanh GELU, Megatron's fused default), its weights made fp16-exact (or
    bf16-exact) so a 16-bit checkpoint holds them unchanged; norms and biases drawn too (transformers starts
    them at 1 and 0)."""
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=4, n_embd=64, n_head=4, n_positions=128, activation_function="gelu_new")).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
            p.copy_(p.bfloat16().float() if bf16_exact else p.half().float())
    return model


class RunsCode:
    """Pickled, it would run a command: what a checkpoint must never make textmill do."""

    def __reduce__(self):
        import os

        return os.system, ("touch ran-code",)
