"""textmill checkpoints out to Megatron-LM: `textmill export megatron --load CKPT --output DIR`.

Two formats, both checkpoint version 3.0 with the `args` Megatron-LM checks when it loads (the model's shape,
the padded vocabulary, the tokenizer) and no optimizer or random state, so Megatron-LM loads them with
`--finetune`, or `--no-load-optim --no-load-rng`:

- `torch_dist` (Megatron-LM's default): written with torch.distributed.checkpoint as Megatron-core's
  `dist_checkpointing.save` writes it (metadata.json, common.pt, .metadata, .distcp), every tensor whole under
  the key Megatron-core's sharded state dict gives it: the decoder's layers stacked on a leading axis, the norms
  under the names Transformer Engine fuses them by (`linear_qkv.layer_norm_weight`), an empty extra state per
  linear layer and layer. Megatron-core cuts it for whatever tensor- and pipeline-parallel layout loads it.
- `torch`: one `model_optim_rng.pt` per rank of the layout asked for, named as Megatron-core's GPTModel with
  local layers names them (`decoder.layers.N.self_attention.linear_qkv.weight`), or with `names="legacy"` as the
  legacy model does (`language_model.encoder.layers.N.self_attention.query_key_value.weight`), for a
  Megatron-LM old enough to have it.

The tensors are the same in all: the fused query/key/value rows in version 2.0's per-head order. The reading
side, and the tensor-parallel splits both share, are in interop/megatron.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from textmill.errors import TextmillError
from textmill.interop.megatron import COLUMN_PARALLEL, GPT2, ROW_PARALLEL, STATE
from textmill.interop.megatron_dist import COMMON, DIST_CONFIG
from textmill.io.files import atomic_folder, exported_folder
from textmill.trainer.checkpoint import TRACKER
from textmill.trainer.gpt_config import GPTConfig


def split_tensor_parallel(name: str, whole: torch.Tensor, tp: int) -> list[torch.Tensor]:
    """Inverse of join_tensor_parallel: each rank's part of a whole tensor."""
    if name.endswith(COLUMN_PARALLEL):
        return [t.clone() for t in whole.chunk(tp, dim=0)]
    if name.endswith(ROW_PARALLEL):
        return [t.clone() for t in whole.chunk(tp, dim=1)]
    return [whole.clone() for _ in range(tp)]


# What a Megatron-LM torch_dist save records of how its sharded state dict was built (common.pt's
# content_metadata): the values of a run without a distributed optimizer.
CONTENT_METADATA = {"singleton_local_shards": False, "chained_optim_avoid_prefix": True}


def megatron_args_of(config: GPTConfig, vocab: int, padded: int, tp: int, pp: int, seq_length: int,
                     fmt: str) -> argparse.Namespace:
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
        pipeline_model_parallel_size=pp, model_parallel_size=tp, params_dtype=torch.float32, fp16=False, bf16=False,
        ckpt_format=fmt)


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
                    for body, part in zip(bodies, split_tensor_parallel(f"{legacy}.{kind}", whole, tp), strict=True):
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


def dist_tensors(ours: dict, words: torch.Tensor, layers: int) -> dict:
    """The whole model under the keys Megatron-core's GPTModel gives its tensors in a sharded state dict: the
    layers' tensors stacked ([layers, ...]), the norms under Transformer Engine's fused names, and each linear
    layer's extra state (empty in local layers, saved as Megatron-core saves it, one object per layer)."""
    state = {"embedding.word_embeddings.weight": words, "embedding.position_embeddings.weight": ours["wpe.weight"]}
    for ours_name, module in GPT2.megatron_core_block.items():
        fused = GPT2.megatron_core_fused_norms.get(ours_name)
        for kind in ("weight", "bias"):
            key = f"decoder.layers.{fused}_{kind}" if fused else f"decoder.layers.{module}.{kind}"
            state[key] = torch.stack([ours[f"blocks.{i}.{ours_name}.{kind}"] for i in range(layers)])
        if not fused:
            for i in range(layers):  # pickled by torch.save, as Megatron-core stores them
                state[f"decoder.layers.{module}._extra_state/shard_{i}_{layers}"] = [None]
    for kind in ("weight", "bias"):
        state[f"decoder.{GPT2.megatron_final_norm}.{kind}"] = ours[f"norm_f.{kind}"]
    return state


def write_dist(folder: Path, state: dict, args: argparse.Namespace, iteration: int) -> None:
    """`state` as a torch_dist checkpoint in `folder` (iter_N or release), written by this one process."""
    import torch.distributed.checkpoint as dcp

    folder.mkdir(parents=True)
    dcp.save(state, checkpoint_id=folder, no_dist=True)
    torch.save({"args": args, "checkpoint_version": 3.0, "iteration": iteration, "content_metadata": CONTENT_METADATA},
               folder / COMMON)
    (folder / "metadata.json").write_text(json.dumps(DIST_CONFIG))


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


MEGATRON_EXPORT = "a Megatron-LM checkpoint"


def export_megatron(load: Path, output: Path, tp: int = 1, pp: int = 1, names: str = "core",
                    fmt: str = "torch_dist") -> dict:
    """The newest checkpoint under `load` as a Megatron-LM GPT checkpoint in `output`: in `fmt` "torch_dist"
    whole, for any layout; in "torch" split into tp x pp shards, under Megatron-core's names (`names` "core",
    what Megatron-LM loads today) or the legacy model's ("legacy")."""
    from textmill.interop.hf import hf_family
    from textmill.trainer.checkpoint import load_model

    output = exported_folder(output, MEGATRON_EXPORT)  # refused before the model is read, not after
    if fmt == "torch_dist" and (tp, pp, names) != (1, 1, "core"):
        raise TextmillError("a torch_dist checkpoint is whole (Megatron-LM cuts it for the layout that loads it) and "
                            "named as Megatron-core names it: --target-*-parallel-size and --legacy-names are for "
                            "--ckpt-format torch")
    model, ckpt = load_model(load)
    config = model.config
    if hf_family(config).model_type != "gpt2" or not config.tie_embeddings or config.activation not in ("gelu", "gelu_tanh"):
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
    args = megatron_args_of(config, vocab, padded, tp, pp, int(ckpt.meta.get("seq_length", config.max_position_embeddings)),
                            fmt)
    saved_iteration = 0 if iteration == "release" else iteration
    with atomic_folder(output, MEGATRON_EXPORT) as tmp:
        if fmt == "torch_dist":
            write_dist(tmp / folder_name, dist_tensors(ours, words, config.num_layers), args, saved_iteration)
        else:
            write_shards(tmp / folder_name, ours, words, args, tp, pp, saved_iteration, names)
        (tmp / TRACKER).write_text(f"{iteration}")
    return {"parameters": model.num_parameters(), "format": fmt, "tp": tp, "pp": pp, "padded_vocab_size": padded,
            "vocab_size": vocab, "iteration": iteration, "output": str(output), "names": names}
