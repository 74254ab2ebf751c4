"""Checkpoints in Megatron's directory layout (REFERENCE.md section 7.1), in either of Megatron's formats:

    <save>/latest_checkpointed_iteration.txt           "<iteration>" or "release"
    --ckpt-format torch (one process):
    <save>/iter_0000100/mp_rank_00/model_optim_rng.pt
    --ckpt-format torch_dist (several processes; torch.distributed.checkpoint):
    <save>/iter_0000100/.metadata, __<rank>_0.distcp   each rank writes its own shards, no gather
    <save>/iter_0000100/textmill.json                  everything that is not a tensor
    <save>/release/...                                  weights only (imported models); training starts at 0

Tensors are keyed by parameter name (model), parameter name and state (optimizer), and rank (random
state), never by layout, so a checkpoint loads into any other parallel layout: torch.distributed.checkpoint
reads each rank's part of each tensor from whichever files hold it.

A checkpoint directory is written under a temporary name and renamed into place, and the tracker file is
rewritten after that, so a killed save never leaves a directory that `--load` would pick up. Loading never
unpickles arbitrary objects: `torch.load(weights_only=True)` for the single file; in the distributed
format only tensors are stored (torch.distributed.checkpoint would unpickle anything else), the rest is JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from textmill.errors import TextmillError
from textmill.pipeline.shards import atomic_path

TRACKER = "latest_checkpointed_iteration.txt"
STATE_FILE = Path("mp_rank_00") / "model_optim_rng.pt"
META_FILE = "textmill.json"
CHECKPOINT_VERSION = 3.0


def checkpoint_dir(root: Path, iteration: int | str) -> Path:
    return root / ("release" if iteration == "release" else f"iter_{iteration:07d}")


def is_writer() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def save_checkpoint(root: Path, iteration: int | str, meta: dict, tensors: dict, fmt: str = "torch") -> Path:
    """Write `tensors` (nested dicts of tensors) and `meta` (JSON values) as the checkpoint of `iteration`
    (an int, or "release") and point the tracker at it. With fmt "torch_dist" every rank must call this."""
    final = checkpoint_dir(root, iteration)
    tmp = root / f".{final.name}.tmp"
    meta = {**meta, "checkpoint_version": CHECKPOINT_VERSION, "iteration": 0 if iteration == "release" else iteration}
    if is_writer():
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
    if fmt == "torch":
        if dist.is_initialized() and dist.get_world_size() > 1:
            raise TextmillError("--ckpt-format torch writes one file from one process; use torch_dist with several")
        (tmp / STATE_FILE).parent.mkdir(parents=True)
        torch.save({**meta, **tensors}, tmp / STATE_FILE)
    else:
        import torch.distributed.checkpoint as dcp

        dcp.save(tensors, checkpoint_id=tmp)
    barrier()
    if is_writer():
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        with atomic_path(root / TRACKER) as t:
            t.write_text(f"{iteration}\n")
    barrier()
    return final


def read_tracker(root: Path) -> int | str | None:
    """The iteration the tracker names, "release", or None when `root` holds no checkpoint."""
    tracker = root / TRACKER
    if not tracker.exists():
        return None
    text = tracker.read_text().strip()
    if text == "release":
        return text
    if not text.isdigit() or int(text) <= 0:
        raise TextmillError(f"{tracker}: expected an iteration number or 'release', found {text!r}")
    return int(text)


@dataclass
class Checkpoint:
    path: Path  # the iteration directory
    meta: dict  # model_config, iteration, args, ... (JSON values)
    format: str  # "torch" or "torch_dist"
    full: dict | None = None  # the single file's tensors (torch format)

    @property
    def release(self) -> bool:
        return self.path.name == "release"

    def stored_keys(self) -> set[str]:
        """Flattened names of the tensors stored ("model.wte.weight", "rng.rank0.torch", ...)."""
        if self.format == "torch":
            return set(flatten(self.full))
        import torch.distributed.checkpoint as dcp

        return set(dcp.FileSystemReader(self.path).read_metadata().state_dict_metadata)

    def load_into(self, template: dict) -> dict:
        """Fill `template` (nested dicts of tensors or DTensors, shaped for the current layout) with the
        stored values; each rank reads only its part."""
        if self.format == "torch":
            try:
                return pick(self.full, template)
            except KeyError as exc:
                raise TextmillError(f"{self.path}: has no {exc.args[0]!r} for this model") from None
        import torch.distributed.checkpoint as dcp

        try:
            with warnings.catch_warnings():  # DCP warns when it reads in one plain process, which is intended
                warnings.filterwarnings("ignore", message="torch.distributed is disabled")
                dcp.load(template, checkpoint_id=self.path)
        except Exception as exc:  # DCP wraps per-rank failures in CheckpointException
            raise TextmillError(f"{self.path}: cannot be read into this model ({type(exc).__name__}: "
                                f"{str(exc).strip().splitlines()[-1][:300]})") from None
        return template


def pick(stored: dict, template: dict) -> dict:
    """The entries of `stored` that `template` names, at every level (a pipeline stage wants only its layers)."""
    return {k: pick(stored[k], v) if isinstance(v, dict) else stored[k] for k, v in template.items()}


def flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        elif isinstance(v, torch.Tensor):
            out[f"{prefix}{k}"] = v
    return out


def load_checkpoint(root: Path) -> Checkpoint | None:
    """The newest checkpoint under `root` (None if there is none). A tracker naming a missing or
    unreadable checkpoint is an error, never a silent fresh start."""
    iteration = read_tracker(root)
    if iteration is None:
        return None
    path = checkpoint_dir(root, iteration)
    if (path / ".metadata").exists():
        try:
            meta = json.loads((path / META_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise TextmillError(f"{path / META_FILE}: not readable ({exc})") from None
        ckpt = Checkpoint(path, meta, "torch_dist")
    else:
        file = path / STATE_FILE
        if not file.exists():
            raise TextmillError(f"{root / TRACKER} names {iteration}, but {path} holds no checkpoint (partial or moved)")
        try:
            state = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises several types for truncated or foreign files
            raise TextmillError(f"{file}: not a readable checkpoint ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
        tensors = {k: v for k, v in state.items() if isinstance(v, dict) and k in ("model", "optimizer_state", "rng")}
        ckpt = Checkpoint(path, {k: v for k, v in state.items() if k not in tensors}, "torch", tensors)
    for key in ("model_config", "iteration"):
        if key not in ckpt.meta:
            raise TextmillError(f"{path}: not a textmill checkpoint (no {key!r})")
    return ckpt


def load_model(root: Path, device: str | torch.device = "cpu"):
    """The model of the newest checkpoint under `root` (any format and layout), in eval mode, and the
    checkpoint."""
    from textmill.trainer.model import GPT, GPTConfig

    ckpt = load_checkpoint(root)
    if ckpt is None:
        raise TextmillError(f"{root}: no checkpoint here ({TRACKER} is missing)")
    model = GPT(GPTConfig(**ckpt.meta["model_config"]))
    model.load_state_dict(ckpt.load_into({"model": model.state_dict()})["model"])
    return model.to(device).eval(), ckpt


def checkpoint_tokenizer(root: Path, meta: dict, vocab_file=None, merge_file=None):
    """The GPT-2 tokenizer a checkpoint was trained with: the given files, or the copies the trainer keeps
    in `<root>/tokenizer/`. Its size must be the checkpoint's unpadded vocabulary size."""
    from textmill.tokenizers.gpt2 import GPT2Tokenizer

    if not (vocab_file and merge_file):
        vocab_file, merge_file = root / "tokenizer" / "vocab.json", root / "tokenizer" / "merges.txt"
        if not vocab_file.exists() or not merge_file.exists():
            raise TextmillError(f"{root}/tokenizer/ holds no vocab.json + merges.txt; give --vocab-file and --merge-file")
    tokenizer = GPT2Tokenizer(vocab_file, merge_file)
    expected = meta.get("vocab_size")
    if expected is not None and tokenizer.vocab_size != expected:
        raise TextmillError(f"{vocab_file} has {tokenizer.vocab_size} tokens, but the checkpoint was trained "
                            f"with a vocabulary of {expected}")
    return tokenizer
