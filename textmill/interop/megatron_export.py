"""textmill checkpoints out to Megatron-LM: `textmill export megatron --load CKPT --output DIR`.

Writes Megatron-LM's `--ckpt-format torch` layout in checkpoint version 3.0, split for the tensor- and
pipeline-parallel layout asked for, with the `args` Megatron-LM checks when it loads (the model's shape, the
layout, the padded vocabulary) and no optimizer or random state: Megatron-LM loads it with `--finetune`, or
`--no-load-optim --no-load-rng`. The tensors are named as Megatron-core's GPTModel with local layers names them
(`decoder.layers.N.self_attention.linear_qkv.weight`), what Megatron-LM loads today (it has no legacy model any
more), or with `names="legacy"` as the legacy model does (`language_model.encoder.layers.N.self_attention.
query_key_value.weight`), for a Megatron-LM old enough to have it. The tensors themselves are the same, the fused
query/key/value rows in version 2.0's per-head order in both. The reading side, and the tensor-parallel splits
both share, are in interop/megatron.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from textmill.errors import TextmillError
from textmill.interop.megatron import COLUMN_PARALLEL, GPT2, ROW_PARALLEL, STATE
from textmill.io.files import atomic_folder
from textmill.trainer.checkpoint import TRACKER
from textmill.trainer.gpt_config import GPTConfig


def split_tensor_parallel(name: str, whole: torch.Tensor, tp: int) -> list[torch.Tensor]:
    """Inverse of join_tensor_parallel: each rank's part of a whole tensor."""
    if name.endswith(COLUMN_PARALLEL):
        return [t.clone() for t in whole.chunk(tp, dim=0)]
    if name.endswith(ROW_PARALLEL):
        return [t.clone() for t in whole.chunk(tp, dim=1)]
    return [whole.clone() for _ in range(tp)]


def megatron_args_of(config: GPTConfig, vocab: int, padded: int, tp: int, pp: int, seq_length: int) -> argparse.Namespace:
    """The arguments Megatron-LM reads back from a checkpoint (--use-checkpoint-args) and compares with its own
    when it loads one (layers, widths, heads, positions, vocabulary padding, tokenizer, layout)."""
    return argparse.Namespace(
        num_layers=config.num_layers, hidden_size=config.hidden_size, ffn_hidden_size=config.ffn_hidden_size,
        num_attention_heads=config.num_attention_heads, kv_channels=config.head_dim,
        max_position_embeddings=config.max_position_embeddings, seq_length=seq_length, add_position_embedding=True,
        position_embedding_type="learned_absolute", normalization="LayerNorm", layernorm_epsilon=config.norm_epsilon,
        add_bias_linear=True, swiglu=False, untie_embeddings_and_output_weights=False, group_query_attention=False,
        bias_gelu_fusion=config.activation == "gelu_tanh", openai_gelu=False, hidden_dropout=config.hidden_dropout,
        attention_dropout=config.attention_dropout, init_method_std=config.init_std,
        padded_vocab_size=padded, make_vocab_size_divisible_by=128,
        tokenizer_type="GPT2BPETokenizer", vocab_size=vocab, tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp, model_parallel_size=tp, params_dtype=torch.float32, fp16=False, bf16=False)


def write_shards(folder: Path, ours: dict, words: torch.Tensor, args: argparse.Namespace, tp: int, pp: int,
                 iteration: int, names: str = "core") -> None:
    """One model_optim_rng.pt per tensor-parallel rank and pipeline stage under `folder` (iter_N or release):
    each rank's part of every tensor, each stage numbering its layers from 0, under Megatron-core GPTModel's
    names (`names` "core") or the legacy model's version 3.0 names ("legacy")."""
    per_stage = args.num_layers // pp
    for stage in range(pp):
        bodies = [{} for _ in range(tp)]  # each rank's blocks and final norm, named inside the decoder/encoder
        for local in range(per_stage):
            for ours_name, legacy in GPT2.megatron_block.items():
                module = legacy if names == "legacy" else GPT2.megatron_core_block[ours_name]
                for kind in ("weight", "bias"):
                    whole = ours[f"blocks.{stage * per_stage + local}.{ours_name}.{kind}"]
                    for body, part in zip(bodies, split_tensor_parallel(f"{legacy}.{kind}", whole, tp)):
                        body[f"layers.{local}.{module}.{kind}"] = part
        if stage == pp - 1:
            for body in bodies:
                for kind in ("weight", "bias"):
                    body[f"{GPT2.megatron_final_norm}.{kind}"] = ours[f"norm_f.{kind}"]
        for t, body in enumerate(bodies):
            first = {"word": words.chunk(tp)[t].clone(), "position": ours["wpe.weight"]} if stage == 0 else None
            # The last stage of several keeps its own copy of the tied embedding, as the output layer.
            head = words.chunk(tp)[t].clone() if stage == pp - 1 and pp > 1 else None
            model_state = (legacy_model if names == "legacy" else core_model)(body, first, head)
            shard = folder / (f"mp_rank_{t:02d}" + (f"_{stage:03d}" if pp > 1 else ""))
            shard.mkdir(parents=True)
            torch.save({"args": args, "checkpoint_version": 3.0, "iteration": iteration, "model": model_state},
                       shard / STATE)


def core_model(body: dict, first: dict | None, head: torch.Tensor | None) -> dict:
    """A rank's tensors as Megatron-core's GPTModel keys its state dict (local layers)."""
    state = {f"decoder.{name}": tensor for name, tensor in body.items()}
    if first is not None:
        state |= {"embedding.word_embeddings.weight": first["word"],
                  "embedding.position_embeddings.weight": first["position"]}
    if head is not None:
        state["output_layer.weight"] = head
    return state


def legacy_model(body: dict, first: dict | None, head: torch.Tensor | None) -> dict:
    """A rank's tensors as Megatron-LM's legacy GPT model nests them."""
    language_model = {"encoder": body}
    state = {"language_model": language_model}
    if first is not None:
        language_model["embedding"] = {"word_embeddings": {"weight": first["word"]},
                                       "position_embeddings": {"weight": first["position"]}}
    if head is not None:
        state["word_embeddings_for_head"] = {"weight": head}
    return state


def export_megatron(load: Path, output: Path, tp: int = 1, pp: int = 1, names: str = "core") -> dict:
    """The newest checkpoint under `load` as a Megatron-LM GPT checkpoint in `output`, split into tp x pp shards,
    under Megatron-core's names (`names` "core", what Megatron-LM loads today) or the legacy model's ("legacy")."""
    from textmill.interop.hf import hf_family
    from textmill.trainer.checkpoint import load_model

    model, ckpt = load_model(load)
    config = model.config
    if hf_family(config) != "gpt2" or not config.tie_embeddings or config.activation not in ("gelu", "gelu_tanh"):
        raise TextmillError("export megatron writes GPT-2 blocks (learned positions, LayerNorm, GELU, biases, tied "
                            "embeddings); this model has others")
    if config.num_attention_heads % tp or config.ffn_hidden_size % tp or config.num_layers % pp:
        raise TextmillError(f"--target-tensor-parallel-size {tp} must divide the {config.num_attention_heads} heads and "
                            f"the {config.ffn_hidden_size} MLP width, --target-pipeline-parallel-size {pp} the "
                            f"{config.num_layers} layers")
    ours = {k: v.float() for k, v in model.state_dict().items()}
    vocab = int(ckpt.meta.get("vocab_size", config.vocab_size))
    # The rows Megatron-LM computes for this vocabulary and layout (128 x TP), which it checks against the args;
    # the rows past the real vocabulary are padding, cut or added (as zeros) to fit.
    multiple = 128 * tp
    padded = -(-vocab // multiple) * multiple
    kept = ours["wte.weight"][:padded]
    words = torch.cat([kept, kept.new_zeros(padded - kept.shape[0], config.hidden_size)])
    iteration = "release" if ckpt.release else int(ckpt.meta["iteration"])
    folder_name = "release" if iteration == "release" else f"iter_{iteration:07d}"
    output = Path(output)
    args = megatron_args_of(config, vocab, padded, tp, pp, int(ckpt.meta.get("seq_length", config.max_position_embeddings)))
    with atomic_folder(output) as tmp:
        write_shards(tmp / folder_name, ours, words, args, tp, pp, 0 if iteration == "release" else iteration, names)
        (tmp / TRACKER).write_text(f"{iteration}")
    return {"parameters": model.num_parameters(), "tp": tp, "pp": pp, "padded_vocab_size": padded, "vocab_size": vocab,
            "iteration": iteration, "output": str(output), "names": names}
