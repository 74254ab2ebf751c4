"""Checkpoints in Megatron's directory layout (REFERENCE.md section 7.1):

    <save>/latest_checkpointed_iteration.txt       "<iteration>" or "release"
    <save>/iter_0000100/mp_rank_00/model_optim_rng.pt
    <save>/release/mp_rank_00/model_optim_rng.pt   weights only (imported models); training starts at 0

A checkpoint directory is written under a temporary name and renamed into place, and the tracker file is
rewritten after that, so a killed save never leaves a directory that `--load` would pick up. Loading uses
`torch.load(weights_only=True)`: tensors and plain Python values only, never arbitrary objects.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from textmill.errors import TextmillError
from textmill.pipeline.shards import atomic_path

TRACKER = "latest_checkpointed_iteration.txt"
STATE_FILE = Path("mp_rank_00") / "model_optim_rng.pt"
CHECKPOINT_VERSION = 3.0


def checkpoint_dir(root: Path, iteration: int | str) -> Path:
    return root / ("release" if iteration == "release" else f"iter_{iteration:07d}")


def save_checkpoint(root: Path, iteration: int | str, state: dict) -> Path:
    """Write `state` as the checkpoint of `iteration` (an int, or "release") and point the tracker at it."""
    final = checkpoint_dir(root, iteration)
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / STATE_FILE).parent.mkdir(parents=True)
    torch.save({**state, "checkpoint_version": CHECKPOINT_VERSION, "iteration": 0 if iteration == "release" else iteration},
               tmp / STATE_FILE)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    with atomic_path(root / TRACKER) as t:
        t.write_text(f"{iteration}\n")
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


def load_checkpoint(root: Path) -> dict | None:
    """The newest checkpoint under `root` (None if there is none). A tracker naming a missing or
    unreadable checkpoint is an error, never a silent fresh start."""
    iteration = read_tracker(root)
    if iteration is None:
        return None
    path = checkpoint_dir(root, iteration) / STATE_FILE
    if not path.exists():
        raise TextmillError(f"{root / TRACKER} names {iteration}, but {path} does not exist (partial or moved checkpoint)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for truncated or foreign files
        raise TextmillError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
    for key in ("model", "model_config", "iteration"):
        if key not in state:
            raise TextmillError(f"{path}: not a textmill checkpoint (no {key!r})")
    state["release"] = iteration == "release"
    return state


def load_model(root: Path, device: str | torch.device = "cpu"):
    """The model of the newest checkpoint under `root`, in eval mode, and the checkpoint's state."""
    from textmill.trainer.model import GPT, GPTConfig

    state = load_checkpoint(root)
    if state is None:
        raise TextmillError(f"{root}: no checkpoint here ({TRACKER} is missing)")
    model = GPT(GPTConfig(**state["model_config"]))
    model.load_state_dict(state["model"])
    return model.to(device).eval(), state


def checkpoint_tokenizer(root: Path, state: dict, vocab_file=None, merge_file=None):
    """The GPT-2 tokenizer a checkpoint was trained with: the given files, or the copies the trainer keeps
    in `<root>/tokenizer/`. Its size must be the checkpoint's unpadded vocabulary size."""
    from textmill.tokenizers.gpt2 import GPT2Tokenizer

    if not (vocab_file and merge_file):
        vocab_file, merge_file = root / "tokenizer" / "vocab.json", root / "tokenizer" / "merges.txt"
        if not vocab_file.exists() or not merge_file.exists():
            raise TextmillError(f"{root}/tokenizer/ holds no vocab.json + merges.txt; give --vocab-file and --merge-file")
    tokenizer = GPT2Tokenizer(vocab_file, merge_file)
    expected = state.get("vocab_size")
    if expected is not None and tokenizer.vocab_size != expected:
        raise TextmillError(f"{vocab_file} has {tokenizer.vocab_size} tokens, but the checkpoint was trained "
                            f"with a vocabulary of {expected}")
    return tokenizer
