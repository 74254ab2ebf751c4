"""What a checkpoint holds of a training run besides the file format (textmill.trainer.checkpoint): the
Trainer's models, optimizers, loss scaler, iteration and random state, saved into a checkpoint and
restored from one into whatever layout the Trainer has now."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from textmill.errors import TextmillError
from textmill.trainer.checkpoint import Checkpoint, is_writer, load_checkpoint, save_checkpoint, start_checkpoint
from textmill.trainer.train_config import check_vocabulary


def rng_state(trainer) -> dict:
    """This rank's random state: the default stream, and dropout's tensor-parallel stream where it has one."""
    rng = {"torch": torch.get_rng_state()}
    if trainer.device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(trainer.device)
    if trainer.streams is not None:
        rng["tensor_parallel"] = trainer.streams.state
    return rng


def save_training_state(trainer) -> Path:
    """A checkpoint of the trainer at its iteration in --save; the tokenizer files go beside the first one."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    root = trainer.config.save
    model_state, optim_state = {}, {}
    for model, optimizer in zip(trainer.models, trainer.optimizers):  # one per pipeline stage on this rank
        m, o = get_state_dict(model, optimizer)
        model_state.update(m)
        optim_state.update(o["state"])
    tensors = {"model": model_state, "optimizer_state": optim_state, "rng": {f"rank{trainer.rank}": rng_state(trainer)}}
    meta = {
        "model_config": trainer.model_config.to_dict(),
        "grad_scaler": trainer.scaler.state_dict(),
        "skipped_iterations": trainer.state.skipped,
        "consumed_samples": trainer.state.iteration * trainer.config.global_batch_size,
        "args": trainer.config.to_dict(),
        "seq_length": trainer.seq_len,
        "vocab_size": trainer.model_vocab_size,
        "tokenizer_vocab_size": trainer.vocab_size,
        "parallel": trainer.dims.to_dict(),
    }
    if trainer.config.async_save:  # one checkpoint in the background at a time: the previous one ends first
        finish_saving(trainer)
        trainer.pending = start_checkpoint(root, trainer.state.iteration, meta, tensors, trainer.checkpoint_group)
        path = trainer.pending.final
    else:
        path = save_checkpoint(root, trainer.state.iteration, meta, tensors, trainer.ckpt_format)
    if is_writer() and not (root / "tokenizer").exists():  # the tokenizer travels with the model
        keep_tokenizer(trainer.config, root / "tokenizer")
    return path


def finish_saving(trainer) -> None:
    """Wait for the checkpoint written in the background (--async-save), if any, and name it in the tracker."""
    if trainer.pending is not None:
        trainer.pending.wait()
        trainer.pending = None


def keep_tokenizer(config, folder: Path) -> None:
    """Copy the tokenizer files the data was made with into `folder` (written whole, then renamed)."""
    from textmill.tokenizers.files import folder_files, open_tokenizer

    if not (config.tokenizer_model or config.vocab_file and config.merge_file):
        return  # nothing to keep: --vocab-size alone, or a vocab.json without its merges
    files = folder_files(open_tokenizer(config.vocab_file, config.merge_file, config.tokenizer_model))
    staging = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name, path in files.items():
        shutil.copyfile(path, staging / name)
    os.replace(staging, folder)


def load_training_state(trainer, root: Path, ckpt: Checkpoint | None = None) -> None:
    """The newest checkpoint of `root` (`ckpt`, when already read) into the trainer: weights, and unless it is
    a release, --finetune or --no-load-optim, the optimizer, loss scale, iteration and (same process count)
    random state."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    ckpt = ckpt or load_checkpoint(root)
    if ckpt is None:
        trainer.say(f"textmill train: no checkpoint in {root}; starting from scratch")
        return
    check_vocabulary(ckpt.meta, trainer.vocab_size, root)
    saved, wanted = ckpt.model_config().architecture(), trainer.model_config.architecture()
    if saved != wanted:
        diff = {k: (v, wanted[k]) for k, v in saved.items() if wanted[k] != v}
        raise TextmillError(f"{root}: the checkpoint's model differs from the one asked for (checkpoint, now): {diff}")
    # A single file holds whole tensors; the sharded format is read straight into this layout.
    options = StateDictOptions(full_state_dict=ckpt.format == "torch")
    weights_only = ckpt.release or trainer.config.finetune or trainer.config.no_load_optim
    if not weights_only and not any(k.startswith("optimizer_state.") for k in ckpt.stored_keys()):
        trainer.say(f"textmill train: {ckpt.path} holds weights only (converted); starting a fresh optimizer")
        weights_only = True
    for model, optimizer in zip(trainer.models, trainer.optimizers):
        if weights_only:
            model_state = ckpt.load_into({"model": get_model_state_dict(model, options=options)})["model"]
            set_model_state_dict(model, model_state, options=options)
            continue
        model_state, optim_state = get_state_dict(model, optimizer, options=options)
        loaded = ckpt.load_into({"model": model_state, "optimizer_state": optim_state["state"]})
        set_state_dict(model, optimizer, model_state_dict=loaded["model"], options=options,
                       optim_state_dict={"state": loaded["optimizer_state"], "param_groups": optim_state["param_groups"]})
    if not weights_only:
        trainer.scaler.load_state_dict(ckpt.meta["grad_scaler"])
    if ckpt.release or trainer.config.finetune:
        return
    trainer.state.iteration = int(ckpt.meta["iteration"])
    trainer.state.skipped = int(ckpt.meta.get("skipped_iterations", 0))
    if not trainer.config.no_load_rng:
        key = f"rng.rank{trainer.rank}.torch"
        if ckpt.meta.get("parallel", {}).get("world", 1) == trainer.dims.world and key in ckpt.stored_keys():
            wanted = rng_state(trainer)
            if f"rng.rank{trainer.rank}.tensor_parallel" not in ckpt.stored_keys():  # saved before it was kept
                wanted.pop("tensor_parallel", None)
            rng = ckpt.load_into({"rng": {f"rank{trainer.rank}": wanted}})["rng"][f"rank{trainer.rank}"]
            torch.set_rng_state(rng["torch"])
            if "cuda" in rng:
                torch.cuda.set_rng_state(rng["cuda"], trainer.device)
            if "tensor_parallel" in rng:
                trainer.streams.state = rng["tensor_parallel"]
        else:
            trainer.say(f"textmill train: {root} was saved by a different number of processes; random state not restored")
