"""Saving a training run into checkpoints and reading it back (the files: textmill.trainer.checkpoint).

The checkpointer saves what it is handed and reaches into nothing else: the model's parts on this rank
(`ModelParts`: weights and optimizer state), the run's own state (a `Stateful`: iteration, skipped steps,
loss scale and this rank's random streams, tensors under "rng"), and the settings it was made with
(`CheckpointSettings`, which carry what every checkpoint records of the run). Loading restores into whatever
layout the model has now."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from textmill.errors import TextmillError
from textmill.trainer.checkpoint import (
    Checkpoint,
    is_writer,
    load_checkpoint,
    read_tracker,
    save_checkpoint,
    start_checkpoint,
)
from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.parts import ModelParts
from textmill.trainer.train_config import check_vocabulary


class Stateful(Protocol):
    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass(frozen=True)
class CheckpointSettings:
    """`save`: the folder checkpoints go to (None: none are saved); `format`: "torch" or "torch_dist";
    `async_save`: torch_dist written in the background; `finetune`, `no_load_optim`, `no_load_rng`: what a
    load leaves out (Megatron's flags); `tokenizer`: (vocab file, merges file, tokenizer model) copied beside
    the first checkpoint; `rank`, `world`: this process and how many there are; `vocab_size`,
    `model_config`: what a loaded checkpoint must match; `record`: what every checkpoint's metadata says of
    the run (model, arguments, sequence length, vocabulary sizes, layout)."""

    save: Path | None
    format: str
    async_save: bool
    finetune: bool
    no_load_optim: bool
    no_load_rng: bool
    tokenizer: tuple[Path | None, Path | None, Path | None]
    rank: int
    world: int
    vocab_size: int
    model_config: GPTConfig
    record: dict


class Checkpointer:
    def __init__(self, settings: CheckpointSettings, say: Callable[[str], None], group=None):
        """`group`: the process group a background save coordinates the ranks over (never training's)."""
        self.settings, self.say, self.group = settings, say, group
        self.pending = None  # the checkpoint being written in the background (--async-save)

    def save(self, iteration: int, parts: ModelParts, run: Stateful) -> Path:
        """A checkpoint of `iteration` in the save folder; the tokenizer files go beside the first one."""
        s = self.settings
        state = run.state_dict()
        tensors = {**parts.state_dict(), "rng": {f"rank{s.rank}": state.pop("rng")}}
        meta = {**s.record, **state}
        if s.async_save:  # one checkpoint in the background at a time: the previous one ends first
            self.finish()
            self.pending = start_checkpoint(s.save, iteration, meta, tensors, self.group)
            path = self.pending.final
        else:
            path = save_checkpoint(s.save, iteration, meta, tensors, s.format)
        if is_writer() and not (s.save / "tokenizer").exists():  # the tokenizer travels with the model
            keep_tokenizer(*s.tokenizer, s.save / "tokenizer")
        return path

    def finish(self) -> None:
        """Wait for the checkpoint written in the background, if any, and name it in the tracker."""
        if self.pending is not None:
            self.pending.wait()
            self.pending = None

    def check_save_folder(self, start: int) -> None:
        """A run that starts at iteration `start` saves the iterations after it: refused when the save folder holds
        a newer checkpoint, which the run would replace and un-name (its tracker moved back to an older one), as
        Megatron-LM does without a word to a user who forgot --load."""
        save = self.settings.save
        try:
            newest = read_tracker(save) if save is not None else None
        except TextmillError:  # a damaged tracker names no checkpoint to lose; the next save writes it whole
            return
        if isinstance(newest, int) and newest > start:
            raise TextmillError(f"{save} holds a checkpoint of iteration {newest}, newer than where this run starts "
                                f"({start}): the run would replace it and name an older one; resume it with --load "
                                f"{save}, or --save to another folder")

    def load(self, root: Path, parts: ModelParts, run: Stateful, ckpt: Checkpoint | None = None) -> None:
        """The newest checkpoint of `root` (`ckpt`, when already read): weights into `parts`, and unless it is
        a release, --finetune or --no-load-optim, the optimizer state, then the run's state into `run`: loss
        scale, iteration and (same number of processes) random state."""
        s = self.settings
        ckpt = ckpt or load_checkpoint(root)
        if ckpt is None:
            self.say(f"textmill train: no checkpoint in {root}; starting from scratch")
            return
        check_vocabulary(ckpt.meta, s.vocab_size, root)
        saved, wanted = ckpt.model_config().architecture(), s.model_config.architecture()
        if saved != wanted:
            diff = {k: (v, wanted[k]) for k, v in saved.items() if wanted[k] != v}
            raise TextmillError(f"{root}: the checkpoint's model differs from the one asked for (checkpoint, now): {diff}")
        stored = ckpt.stored_keys()
        weights_only = ckpt.release or s.finetune or s.no_load_optim
        if not weights_only and not any(k.startswith("optimizer_state.") for k in stored):
            self.say(f"textmill train: {ckpt.path} holds weights only (converted); starting a fresh optimizer")
            weights_only = True
        # A single file holds whole tensors; the sharded format is read straight into this layout.
        parts.load(ckpt.load_into, full=ckpt.format == "torch", weights_only=weights_only)
        restored = {} if weights_only else {"grad_scaler": ckpt.meta["grad_scaler"]}
        if not (ckpt.release or s.finetune):
            restored["iteration"] = int(ckpt.meta["iteration"])
            restored["skipped_iterations"] = int(ckpt.meta.get("skipped_iterations", 0))
            rng = self.stored_rng(ckpt, run)
            if rng is not None:
                restored["rng"] = rng
        run.load_state_dict(restored)

    def stored_rng(self, ckpt: Checkpoint, run: Stateful) -> dict | None:
        """This rank's random state as the checkpoint holds it, or None: --no-load-rng, or saved by a different
        number of processes (said), or by a textmill that kept none."""
        s = self.settings
        rank = f"rank{s.rank}"
        if s.no_load_rng or f"rng.{rank}.torch" not in ckpt.stored_keys():
            return None
        if ckpt.meta.get("parallel", {}).get("world", 1) != s.world:
            self.say(f"textmill train: {ckpt.path.parent} was saved by a different number of processes; "
                     "random state not restored")
            return None
        wanted = run.state_dict()["rng"]
        if f"rng.{rank}.tensor_parallel" not in ckpt.stored_keys():  # saved before it was kept
            wanted.pop("tensor_parallel", None)
        return ckpt.load_into({"rng": {rank: wanted}})["rng"][rank]


def keep_tokenizer(vocab_file: Path | None, merge_file: Path | None, tokenizer_model: Path | None, folder: Path) -> None:
    """Copy the tokenizer files the data was made with into `folder` (written whole, then renamed)."""
    from textmill.tokenizers.files import folder_files, open_tokenizer

    if not (tokenizer_model or vocab_file and merge_file):
        return  # nothing to keep: --vocab-size alone, or a vocab.json without its merges
    files = folder_files(open_tokenizer(vocab_file, merge_file, tokenizer_model))
    staging = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name, path in files.items():
        shutil.copyfile(path, staging / name)
    os.replace(staging, folder)
