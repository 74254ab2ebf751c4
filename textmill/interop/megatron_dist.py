"""The model tensors of a Megatron-LM checkpoint in `--ckpt-format torch_dist` (Megatron-LM's default since
Megatron-core's distributed checkpointing), read as one whole model.

Such an iteration folder holds:

    metadata.json    {"sharded_backend": "torch_dist", ...}: which of Megatron's formats this is
    common.pt        what is not sharded (args, checkpoint_version, iteration, ...), a torch.save pickle
    .metadata        torch.distributed.checkpoint's index: each entry's global shape and where its chunks lie
    __R_N.distcp     the chunks rank R wrote (N: its writer thread)

The tensors are indexed by their whole-model shape, whatever tensor- and pipeline-parallel layout wrote them,
so reading one needs no joining. They have Megatron-core's names, the decoder's layers stacked on a leading
axis (`decoder.layers.mlp.linear_fc1.weight` is [layers, ffn, hidden]), the layer norms named as Transformer
Engine fuses them (`linear_qkv.layer_norm_weight`) whichever layers were used, and the tied output layer saved
as well. Entries that are bytes (Transformer Engine's extra state, random states) and the optimizer's are not
read; `.metadata` is unpickled through textmill's allowlist (trainer/checkpoint.py).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch

from textmill.errors import TextmillError
from textmill.trainer.dcp_metadata import load_dcp, read_dcp_metadata

COMMON = "common.pt"
# metadata.json of Megatron-core's torch_dist format: the backends of the sharded tensors and of common.pt.
DIST_CONFIG = {"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
               "common_backend_version": 1}
# The model's own entries; the optimizer's are under "optimizer.", and the output layer is the word embedding
# (an untied one is refused with the args).
MODEL_PREFIXES = ("embedding.", "decoder.")
PER_LAYER = re.compile(r"^decoder\.layers\.\d+\.")


def is_dist_checkpoint(folder: Path) -> bool:
    return (folder / ".metadata").exists()


def read_dist_model(folder: Path) -> dict[str, torch.Tensor]:
    """The model tensors of the torch_dist checkpoint in `folder`, named as Megatron-core's GPTModel names
    them in its state dict (`decoder.layers.3.self_attention.linear_qkv.weight`)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    try:
        backend = json.loads((folder / "metadata.json").read_text()).get("sharded_backend")
    except (OSError, ValueError, AttributeError):
        backend = None
    if backend != DIST_CONFIG["sharded_backend"]:
        raise TextmillError(f"{folder}: a distributed checkpoint, but not one in Megatron-LM's torch_dist format "
                            f"(its metadata.json names sharded_backend {backend!r})")
    metadata = read_dcp_metadata(folder, foreign=True)
    entries = {name: entry for name, entry in metadata.state_dict_metadata.items()
               if name.startswith(MODEL_PREFIXES) and isinstance(entry, TensorStorageMetadata)}
    check_sizes(folder, metadata, entries)
    wanted = {name: torch.empty(entry.size, dtype=entry.properties.dtype) for name, entry in entries.items()}
    if not any(name.startswith("decoder.") for name in wanted):
        raise TextmillError(f"{folder}: no decoder.* tensors in it: not a Megatron-core GPT checkpoint")
    load_dcp(folder, wanted, foreign=True)
    model = {}
    for name, tensor in wanted.items():
        if name.startswith("decoder.layers.") and not PER_LAYER.match(name):
            rest = name.removeprefix("decoder.layers.")
            for index, layer in enumerate(tensor.unbind(0)):
                model[f"decoder.layers.{index}.{rest}"] = layer
        else:
            model[name] = tensor
    return model


def check_sizes(folder: Path, metadata, entries: dict) -> None:
    """What `.metadata` declares of the model's tensors, checked against the files before anything is allocated:
    no negative size, no more bytes than the .distcp files hold, and every chunk inside its file (a file cut
    short is named)."""
    files = {p.name: p.stat().st_size for p in folder.glob("*.distcp")}
    for name, entry in entries.items():
        if any(d < 0 for d in entry.size):
            raise TextmillError(f"{folder / '.metadata'}: declares a negative size for {name} ({list(entry.size)})")
    declared = sum(math.prod(entry.size) * entry.properties.dtype.itemsize for entry in entries.values())
    if declared > sum(files.values()):
        raise TextmillError(f"{folder / '.metadata'}: declares {declared:,} bytes of model tensors, more than its "
                            f".distcp files hold ({sum(files.values()):,} bytes)")
    for index, where in metadata.storage_data.items():
        if index.fqn in entries and where.offset + where.length > files.get(str(where.relative_path), -1):
            have = files.get(str(where.relative_path))
            raise TextmillError(f"{folder / where.relative_path}: {'missing' if have is None else 'cut short'} "
                                f"(.metadata places {index.fqn} at bytes {where.offset:,}-{where.offset + where.length:,}"
                                f"{'' if have is None else f'; the file has {have:,}'})")
