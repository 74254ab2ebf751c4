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
