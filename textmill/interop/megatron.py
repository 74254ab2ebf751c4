"""Megatron-LM checkpoints into textmill: `textmill import megatron PATH --save CKPT`.

Reads the `--ckpt-format torch` GPT checkpoints Megatron-LM writes and NVIDIA released (GPT-2 345M): a folder
with `latest_checkpointed_iteration.txt` naming `release` or an iteration, and under that folder one
`mp_rank_TT/model_optim_rng.pt` per tensor-parallel rank (`mp_rank_TT_PPP` with pipeline stages). Each file is
a pickle: it is read with torch's weights-only loader and an allowlist of the few classes Megatron puts in it
(the `args` namespace, numpy's random state, Megatron's own enums and config as stand-ins), so a file that
would run code is refused, never run. `--ckpt-format torch_dist` folders (Megatron-LM's default format) are
read too: interop/megatron_dist.py.

The legacy model's tensors live under `model.language_model`: `embedding` (word and position embeddings) and
`transformer` (`encoder` in later versions) with `layers.N.*` and `final_layernorm`; Megatron-core's GPTModel
names them flat (`embedding.word_embeddings.weight`, `decoder.layers.N.self_attention.linear_qkv.weight`, with
Transformer Engine the norms inside the next linear layer). Tensor-parallel shards are
joined (column-parallel matrices and the vocabulary-parallel embedding by rows, row-parallel ones by columns,
the rest copied on every rank), pipeline stages concatenated (each numbers its layers from 0), and the fused
query/key/value rows of checkpoint versions 0 and 1.0 put in version 2.0's per-head order, which is textmill's
(docs/REFERENCE.md section 7). GPT-2-shaped models only: other blocks are refused in one line.

Export, the other way: interop/megatron_export.py.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch

from textmill.errors import TextmillError
from textmill.io.numbers import whole_number
from textmill.interop.families import FAMILIES
from textmill.interop.megatron_dist import COMMON, is_dist_checkpoint, read_dist_model
from textmill.trainer.checkpoint import TRACKER
from textmill.trainer.gpt_config import GPTConfig

STATE = "model_optim_rng.pt"
SHARD = re.compile(r"^mp_rank_(\d{2})(?:_(\d{3}))?$")

# NVIDIA's GPT-2 345M release has no `args`: its shape, as transformers' converter assumes it.
RELEASE_345M_HEADS = 16


class MegatronValue:
    """Stands in for an object of Megatron-LM's own classes among what it saves (enum members in the args and
    the rerun state, its optimizer config): the values are kept, and none of Megatron's code is imported or
    run to make them."""

    def __init__(self, *values):
        self.values = values


# Megatron-core's own classes in its checkpoints (the list it registers with torch.serialization itself,
# megatron/core/safe_globals.py), by the names the pickle gives them.
MEGATRON_CLASSES = ("megatron.core.enums.ModelType", "megatron.core.transformer.enums.AttnBackend",
                    "megatron.core.transformer.enums.CudaGraphScope",
                    "megatron.core.optimizer.optimizer_config.OptimizerConfig",
                    "megatron.core.rerun_state_machine.RerunDiagnostic", "megatron.core.rerun_state_machine.RerunMode",
                    "megatron.core.rerun_state_machine.RerunState")


def allowed_globals() -> list:
    """What a Megatron-LM model_optim_rng.pt may hold beyond tensors and plain values: the argparse namespace
    of its arguments (paths, namespaces and signals among them, and Megatron's own classes as stand-ins),
    numpy's random state (an array) among the saved random states, and the byte buffers of Transformer
    Engine's `_extra_state` (never unpickled further: skipped). Files written under numpy 1 name the array
    constructor numpy.core..., under numpy 2 numpy._core...."""
    import io
    import pathlib
    import signal
    import types

    import numpy as np

    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy 1
        from numpy.core.multiarray import _reconstruct
    # The state's key array is uint32; under numpy 2 its dtype is rebuilt from a class of its own.
    return [argparse.Namespace, types.SimpleNamespace, pathlib.PosixPath, signal.Signals, io.BytesIO,
            np.ndarray, np.dtype, type(np.dtype(np.uint32)),
            (_reconstruct, "numpy.core.multiarray._reconstruct"), (_reconstruct, "numpy._core.multiarray._reconstruct"),
            *((MegatronValue, name) for name in MEGATRON_CLASSES)]


def read_megatron_file(file: Path, model: bool = True) -> dict:
    """One model_optim_rng.pt (or a torch_dist folder's common.pt: `model` False), loaded without running code
    from it; anything else is one error line."""
    try:
        with torch.serialization.safe_globals(allowed_globals()):
            state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # a refused global, a truncated or foreign file: all one answer
        reason = str(exc).strip().splitlines()
        refused = next((line for line in reason if any(w in line for w in ("GLOBAL", "Unsupported", "but got"))),
                       reason[0] if reason else "")
        raise TextmillError(f"{file}: refused or unreadable as a Megatron-LM checkpoint ({type(exc).__name__}: "
                            f"{refused.strip()[:200]})") from None
    if not isinstance(state, dict):
        raise TextmillError(f"{file}: not a Megatron-LM checkpoint (a {type(state).__name__}, not a dictionary)")
    if model and not isinstance(state.get("model"), dict):
        raise TextmillError(f"{file}: not a Megatron-LM checkpoint (no 'model' dictionary in it)")
    return state


def checkpoint_folder(path: Path) -> tuple[Path, str]:
    """The folder of the checkpoint `path` points at (a save directory with a tracker file, or an iter_N or
    release folder itself), and what the tracker said ("release" or the iteration)."""
    path = Path(path)
    tracker = path / TRACKER
    if tracker.exists():
        said = tracker.read_text().strip()
        if said == "release":
            return path / "release", said
        iteration = whole_number(said)
        if not iteration:
            raise TextmillError(f"{tracker}: says {said[:40]!r}, neither 'release' nor an iteration")
        return path / f"iter_{iteration:07d}", said
    if any(SHARD.match(p.name) for p in path.glob("mp_rank_*")) or is_dist_checkpoint(path):
        return path, path.name
    raise TextmillError(f"{path}: no {TRACKER}, no mp_rank_* folders and no .metadata: not a Megatron-LM checkpoint")


def shard_files(folder: Path) -> dict[tuple[int, int], Path]:
    """(tensor-parallel rank, pipeline stage) -> its model_optim_rng.pt, checked to be a whole grid."""
    shards = {}
    for sub in folder.glob("mp_rank_*"):
        m = SHARD.match(sub.name)
        if m and (sub / STATE).exists():
            shards[int(m.group(1)), int(m.group(2) or 0)] = sub / STATE
    if not shards:
        raise TextmillError(f"{folder}: neither mp_rank_*/{STATE} (--ckpt-format torch) nor .metadata (torch_dist) "
                            "in it: not a Megatron-LM checkpoint")
    tp, pp = max(t for t, _ in shards) + 1, max(p for _, p in shards) + 1
    missing = [f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "") for t in range(tp) for p in range(pp) if (t, p) not in shards]
    if missing:
        raise TextmillError(f"{folder}: {tp} x {pp} shards expected, missing {', '.join(missing[:4])}")
    return shards


def model_tensors(state: dict, file: Path) -> tuple[torch.Tensor | None, torch.Tensor | None, dict]:
    """A shard's word and position embeddings (None on stages without them) and its blocks' tensors, named as
    the legacy model names them under its transformer (`layers.N.self_attention.dense.weight`,
    `final_layernorm.bias`), whichever of Megatron-LM's two GPT models wrote the file."""
    model = state["model"]
    if "language_model" in model:  # the legacy model: nested dictionaries
        lm = model["language_model"]
        body = lm.get("transformer", lm.get("encoder"))
        if not isinstance(body, dict):
            raise TextmillError(f"{file}: model.language_model has no transformer or encoder")
        embedding = lm.get("embedding", {})
        word, position = (embedding.get(key, {}).get("weight") for key in ("word_embeddings", "position_embeddings"))
        return (tensor_or_none(word, "embedding.word_embeddings.weight", file),
                tensor_or_none(position, "embedding.position_embeddings.weight", file),
                {n: tensor_or_none(t, n, file) for n, t in body.items() if not n.endswith("._extra_state")})
    if any(k.startswith("decoder.") for k in model):  # Megatron-core's GPTModel: flat names
        body = {}
        for name, tensor in model.items():
            if name.startswith("decoder.") and not name.endswith("._extra_state"):
                body[legacy_name(name.removeprefix("decoder."), file)] = tensor_or_none(tensor, name, file)
        return (tensor_or_none(model.get("embedding.word_embeddings.weight"), "embedding.word_embeddings.weight", file),
                tensor_or_none(model.get("embedding.position_embeddings.weight"), "embedding.position_embeddings.weight", file),
                body)
    if any(k.startswith("model") and k[5:].isdigit() for k in state):
        raise TextmillError(f"{file}: an interleaved (virtual) pipeline checkpoint; convert it without virtual stages "
                            "first (Megatron-LM's tools/checkpoint)")
    raise TextmillError(f"{file}: neither Megatron-LM's legacy GPT (model.language_model) nor Megatron-core's GPTModel "
                        "(decoder.layers...) is in it")


def tensor_or_none(value, name: str, file: Path) -> torch.Tensor | None:
    """A model entry of a Megatron file: a tensor, or absent (None); anything else is one error line."""
    if value is not None and not isinstance(value, torch.Tensor):
        raise TextmillError(f"{file}: its {name} is a {type(value).__name__}, not a tensor")
    return value


GPT2 = FAMILIES["gpt2"]
FROM_MEGATRON = {theirs: ours for ours, theirs in GPT2.megatron_block.items()}
CORE_TO_LEGACY = {core: GPT2.megatron_block[ours] for ours, core in GPT2.megatron_core_block.items()}
FUSED_NORMS = {core: GPT2.megatron_block[ours] for ours, core in GPT2.megatron_core_fused_norms.items()}


def legacy_name(core: str, file: Path) -> str:
    """Megatron-core's `layers.N.self_attention.linear_qkv.weight` as the legacy model's
    `layers.N.self_attention.query_key_value.weight`; Transformer Engine's norms fused into the next linear
    layer (`linear_qkv.layer_norm_weight`) as the norms they are."""
    if core.startswith(GPT2.megatron_final_norm + "."):
        return core
    m = re.match(r"^(layers\.\d+)\.(.+)\.([a-z_]+)$", core)
    module, kind = (m.group(2), m.group(3)) if m else ("", "")
    if kind.startswith("layer_norm_") and f"{module}.layer_norm" in FUSED_NORMS:
        return f"{m.group(1)}.{FUSED_NORMS[module + '.layer_norm']}.{kind.removeprefix('layer_norm_')}"
    if module not in CORE_TO_LEGACY:
        raise TextmillError(f"{file}: a tensor textmill's GPT-2 blocks do not have: decoder.{core}")
    return f"{m.group(1)}.{CORE_TO_LEGACY[module]}.{kind}"


def qkv_in_version_2(rows: torch.Tensor, version: float, heads: int) -> torch.Tensor:
    """One shard's fused query/key/value rows in [heads, (q, k, v), head_dim] order (version 2.0 and later,
    textmill's): version 0 wrote [(q, k, v), heads, head_dim], version 1.0 [heads, head_dim, (q, k, v)]."""
    if version >= 2.0:
        return rows
    tail = rows.shape[1:]
    if version == 0:
        return rows.reshape(3, heads, -1, *tail).transpose(0, 1).reshape(rows.shape).contiguous()
    return rows.reshape(heads, -1, 3, *tail).transpose(1, 2).reshape(rows.shape).contiguous()


COLUMN_PARALLEL = ("query_key_value.weight", "query_key_value.bias", "dense_h_to_4h.weight", "dense_h_to_4h.bias")
ROW_PARALLEL = ("attention.dense.weight", "dense_4h_to_h.weight")


def join_tensor_parallel(name: str, parts: list[torch.Tensor]) -> torch.Tensor:
    """A tensor whole again from its tensor-parallel shards (Megatron's splits: docs/REFERENCE.md section 7.2)."""
    if name.endswith(COLUMN_PARALLEL):
        return torch.cat(parts, dim=0)
    if name.endswith(ROW_PARALLEL):
        return torch.cat(parts, dim=1)
    return parts[0]  # norms, row-parallel biases: the same on every rank


def textmill_name(megatron: str) -> str:
    """`layers.3.self_attention.dense.weight` -> `blocks.3.attn.proj.weight`; `final_layernorm.bias` -> `norm_f.bias`.
    Attention is `attention` before checkpoint version 3.0, `self_attention` after."""
    if megatron.startswith(GPT2.megatron_final_norm + "."):
        return "norm_f." + megatron.removeprefix(GPT2.megatron_final_norm + ".")
    m = re.match(r"^layers\.(\d+)\.(.+)\.(weight|bias)$", megatron)
    module = m and ("self_" + m.group(2) if m.group(2).startswith("attention.") else m.group(2))
    if module not in FROM_MEGATRON:
        raise TextmillError(f"a tensor textmill's GPT-2 blocks do not have: {megatron}")
    return f"blocks.{m.group(1)}.{FROM_MEGATRON[module]}.{m.group(3)}"


def megatron_args(args, file: Path) -> dict:
    """The model's shape from Megatron's arguments; a block textmill's GPT-2 does not have is refused."""
    def get(name: str, default=None):  # older versions lack the newer flags
        return getattr(args, name, default)

    for name in ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"):
        if not hasattr(args, name):
            raise TextmillError(f"{file}: its args have no {name} (the model's shape); give a checkpoint with its args")

    unlike = [what for what, differs in (
        (f"position embeddings {get('position_embedding_type')!r}",
         get("position_embedding_type", "learned_absolute") != "learned_absolute"),
        (f"normalization {get('normalization')!r}", get("normalization", "LayerNorm") != "LayerNorm"),
        ("SwiGLU", get("swiglu", False)), ("grouped-query attention", get("group_query_attention", False)),
        ("untied output layer", get("untie_embeddings_and_output_weights", False)),
        ("no linear biases", not get("add_bias_linear", True)), ("mixture of experts", bool(get("num_experts"))),
        ("residual after the layer norm", get("apply_residual_connection_post_layernorm", False)))
        if differs]
    if unlike:
        raise TextmillError(f"{file}: a Megatron-LM model textmill cannot import yet ({'; '.join(unlike)}): GPT-2 "
                            "blocks only (learned positions, LayerNorm, GELU, biases, tied embeddings)")
    return {"num_layers": args.num_layers, "hidden_size": args.hidden_size, "num_attention_heads": args.num_attention_heads,
            "max_position_embeddings": args.max_position_embeddings, "ffn_hidden_size": get("ffn_hidden_size"),
            # Megatron's fused bias-GELU (its default) and --openai-gelu are the tanh approximation.
            "activation": "gelu_tanh" if get("bias_gelu_fusion", True) or get("openai_gelu", False) else "gelu",
            "norm_epsilon": get("layernorm_epsilon", 1e-5), "hidden_dropout": get("hidden_dropout", 0.1),
            "attention_dropout": get("attention_dropout", 0.1), "init_std": get("init_method_std", 0.02)}


def read_megatron(path: Path, heads: int | None = None) -> tuple[GPTConfig, dict, dict]:
    """The model config, textmill's state dict and what was read (folder, version, layout, iteration) of the
    Megatron-LM checkpoint at `path`. `heads` stands in for `args` where the checkpoint has none (NVIDIA's
    345M release: 16 heads)."""
    folder, said = checkpoint_folder(path)
    dist = is_dist_checkpoint(folder)
    if dist:  # whole tensors already: read as one shard
        shards = {(0, 0): folder / COMMON}
        states = {(0, 0): {**read_megatron_file(shards[0, 0], model=False), "model": read_dist_model(folder)}}
    else:
        shards = shard_files(folder)
        states = {key: read_megatron_file(file) for key, file in sorted(shards.items())}
    tp, pp = max(t for t, _ in shards) + 1, max(p for _, p in shards) + 1
    first = states[0, 0]
    version = first.get("checkpoint_version", 0)
    if not isinstance(version, (int, float)) or isinstance(version, bool):
        raise TextmillError(f"{shards[0, 0]}: its checkpoint_version {version!r} is not a number")
    version = float(version)
    args = first.get("args")
    tensors = {key: model_tensors(state, shards[key]) for key, state in states.items()}
    word_parts, positions = [tensors[t, 0][0] for t in range(tp)], tensors[0, 0][1]
    if any(w is None for w in word_parts) or positions is None:
        raise TextmillError(f"{shards[0, 0]}: no word and position embeddings on the first stage")
    words = torch.cat(word_parts)  # the vocabulary-parallel embedding: rows split over the ranks, padding and all
    shape = megatron_args(args, shards[0, 0]) if isinstance(args, argparse.Namespace) else None
    head_count = shape["num_attention_heads"] if shape else heads or RELEASE_345M_HEADS
    ours = {"wte.weight": words.float(), "wpe.weight": positions.float()}
    offset = 0
    for stage in range(pp):
        bodies = [tensors[t, stage][2] for t in range(tp)]
        names = list(bodies[0])
        for t in range(1, tp):  # every rank of a stage holds its part of the same tensors
            for lacking, file in ((bodies[0].keys() - bodies[t].keys(), shards[t, stage]),
                                  (bodies[t].keys() - bodies[0].keys(), shards[0, stage])):
                if lacking:
                    raise TextmillError(f"{file}: lacks {min(lacking)}, which another tensor-parallel shard of its "
                                        "stage holds")
        layers = {int(m.group(1)) for n in names if (m := re.match(r"^layers\.(\d+)\.", n))}
        for name in names:
            parts = [body[name] for body in bodies]
            if name.endswith(("query_key_value.weight", "query_key_value.bias")):
                parts = [qkv_in_version_2(p, version, head_count // tp) for p in parts]
            local = textmill_name(name)
            if local.startswith("blocks."):  # a stage numbers its layers from 0
                index, rest = local.removeprefix("blocks.").split(".", 1)
                local = f"blocks.{int(index) + offset}.{rest}"
            ours[local] = join_tensor_parallel(name, parts).float()
        offset += len(layers)
    if shape is None:  # the 345M release: the shape from the tensors, the heads from the caller
        shape = {"num_layers": offset, "hidden_size": words.shape[1], "num_attention_heads": head_count,
                 "max_position_embeddings": positions.shape[0], "ffn_hidden_size": ours["blocks.0.mlp.fc1.weight"].shape[0],
                 "activation": "gelu_tanh"}
    config = GPTConfig(vocab_size=words.shape[0], **{k: v for k, v in shape.items() if v is not None})
    read = {"folder": str(folder), "tracker": said, "checkpoint_version": version, "format": "torch_dist" if dist else "torch",
            # a torch_dist checkpoint is whole: the layout that wrote it is in its args
            "tensor_parallel": getattr(args, "tensor_model_parallel_size", None) if dist else tp,
            "pipeline_parallel": getattr(args, "pipeline_model_parallel_size", None) if dist else pp,
            "iteration": first.get("iteration"), "args": isinstance(args, argparse.Namespace)}
    return config, ours, read


def import_megatron(path: Path, save: Path, vocab_file: Path | None, merge_file: Path | None,
                    heads: int | None = None) -> dict:
    """The Megatron-LM checkpoint at `path` as a textmill release checkpoint in `save`, with the GPT-2 BPE
    files it was trained with (a Megatron checkpoint carries no tokenizer)."""
    from textmill.interop.release import checked_model, save_release
    from textmill.tokenizers.files import open_tokenizer

    if vocab_file is None or merge_file is None:
        raise TextmillError("a Megatron-LM checkpoint carries no tokenizer: give --vocab-file and --merge-file (GPT-2's "
                            "vocab.json and merges.txt for NVIDIA's GPT-2 345M)")
    model_config, state, read = read_megatron(path, heads)
    model = checked_model(model_config, state, Path(read["folder"]))
    tokenizer = open_tokenizer(Path(vocab_file), Path(merge_file))
    save_release(save, model, tokenizer, tokenizer.vocab_size, Path(read["folder"]), megatron=read)
    return {"family": "megatron gpt2", "parameters": model.num_parameters(), "vocab_size": tokenizer.vocab_size,
            "padded_vocab_size": model_config.vocab_size, "output": str(save), **read}
