"""`textmill checkpoint convert`: rewrite a checkpoint's weights in a given tensor/pipeline-parallel layout,
what Megatron's tools/checkpoint_util.py does offline.

textmill's trainer already reads any checkpoint into any layout at load time (tensors are stored by
name, and torch.distributed.checkpoint reads each rank's part); this command is for users who want files
sharded for a particular layout, or one single file. It starts TP x PP processes (torchrun), each builds its
part of the model, reads its part of the weights and writes it. Like checkpoint_util it carries the weights
only: training resumed from a converted checkpoint starts a fresh optimizer at the stored iteration.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import torch

from textmill.errors import TextmillError
from textmill.trainer.checkpoint import is_writer, load_checkpoint, save_checkpoint
from textmill.trainer.model import GPT
from textmill.trainer.parallel.dims import ParallelDims, distributed_session, torchrun, world_from_env
from textmill.trainer.parallel.pipeline_parallel import split_stages
from textmill.trainer.parallel.tensor_parallel import apply_tensor_parallel


def convert_checkpoint(load: Path, save: Path, tp: int, pp: int, fmt: str, argv: list[str]) -> dict | None:
    """Write the newest checkpoint of `load` into `save` as a TP x PP layout. Returns the summary (None on
    ranks other than 0, and in the launching process, whose torchrun children print it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

    started = time.perf_counter()
    ckpt = load_checkpoint(load)
    if ckpt is None:
        raise TextmillError(f"{load}: no checkpoint here")
    if Path(save).resolve() == Path(load).resolve():
        raise TextmillError("--save must be another directory than --load")
    model_config = ckpt.model_config()
    dims = ParallelDims(tp * pp, tp, pp)
    dims.check(model_config, global_batch=pp, micro_batch=1)  # batch sizes do not matter here
    if fmt == "torch" and dims.distributed:
        raise TextmillError("--ckpt-format torch is one file from one process; use torch_dist for several ranks")
    world = world_from_env()[0]
    if world == 1 and dims.distributed:
        torchrun(dims.world, ["-m", "textmill.cli", "checkpoint", "convert", *argv])
        return None
    if world != dims.world:
        raise TextmillError(f"started as {world} processes, but the target layout has {dims.world} ranks")

    with distributed_session(dims, torch.device("cpu"), 10.0) as mesh:
        with torch.device("meta"):  # each rank allocates only its part, below
            model = GPT(model_config)
        parameters = model.num_parameters()
        chunks = split_stages(model, mesh["pp"].get_local_rank(), pp, 1) if pp > 1 else [(0, model)]
        options = StateDictOptions(full_state_dict=ckpt.format == "torch")
        weights = {}
        for _, chunk in chunks:
            if tp > 1:
                apply_tensor_parallel(chunk, mesh["tp"], sequence_parallel=False)
            chunk.allocate(torch.device("cpu"))
            template = get_model_state_dict(chunk, options=options)
            set_model_state_dict(chunk, ckpt.load_into({"model": template})["model"], options=options)
            weights.update(get_model_state_dict(chunk))
        keep = ("model_config", "vocab_size", "tokenizer_vocab_size", "seq_length", "args", "consumed_samples",
                "skipped_iterations")
        meta = {k: v for k, v in ckpt.meta.items() if k in keep}
        meta |= {"parallel": dims.to_dict(), "converted_from": str(ckpt.path)}
        iteration = "release" if ckpt.release else int(ckpt.meta["iteration"])
        path = save_checkpoint(save, iteration, meta, {"model": weights}, fmt)
        if is_writer() and (load / "tokenizer").is_dir():
            shutil.copytree(load / "tokenizer", save / "tokenizer", dirs_exist_ok=True)
        writer = is_writer()
    if not writer:
        return None
    return {"from": str(ckpt.path), "to": str(path), "tp": tp, "pp": pp, "format": fmt, "parameters": parameters,
            "seconds": time.perf_counter() - started}
