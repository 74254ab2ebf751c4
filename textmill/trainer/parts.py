"""What a Trainer is made of, each part built by one function from the checked settings: the data splits
(`training_data`) and the model cut into this rank's pipeline stages with one optimizer per stage
(`build_model_parts`). `ModelParts` is also what a checkpoint saves of the model and reads back into it."""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

from textmill.errors import TextmillError
from textmill.trainer.blend import parse_data_path
from textmill.trainer.checkpoint import is_writer
from textmill.trainer.data import DataConfig, build_splits
from textmill.trainer.model import GPT
from textmill.trainer.optim import make_optimizer
from textmill.trainer.parallel.data_parallel import apply_data_parallel
from textmill.trainer.parallel.pipeline_parallel import build_schedule, embedding_group, split_stages
from textmill.trainer.parallel.rng import DropoutStreams, use_dropout_streams
from textmill.trainer.parallel.tensor_parallel import apply_tensor_parallel
from textmill.trainer.train_config import TrainConfig


class TrainingData(NamedTuple):
    train: object  # a GPTDataset, or a blend of them
    valid: object | None


def training_data(config: TrainConfig, seq_len: int, vocab_size: int, distributed: bool) -> TrainingData:
    """The training and validation splits, sized for --train-iters and --eval-iters global batches. Rank 0
    builds (and caches) the sample index first; the other ranks then read the cache."""
    prefixes, weights = parse_data_path(config.data_path)
    weighted = len(config.data_path) == 2 * len(prefixes)
    gb = config.global_batch_size
    data_config = DataConfig(prefixes, weights if weighted else None, config.split, seq_len, config.seed, vocab_size)
    train = valid = None
    for building in (True, False):
        if is_writer() == building:
            train, valid, _ = build_splits(data_config, [config.train_iters * gb, config.eval_iters * gb, 0],
                                           cache=not config.no_index_cache)
        if distributed:
            torch.distributed.barrier()
    if train is None:
        raise TextmillError(f"--split {config.split} leaves no training documents")
    return TrainingData(train, valid)


@dataclass
class ModelParts:
    """This rank's share of the model. `chunks`: (stage index, the stage's GPT); `models`: what runs each
    stage (the chunk, or its data-parallel wrapper); `optimizers`: one per stage; `streams`: dropout's
    tensor-parallel streams (parallel/rng.py), or None; `pipeline`: the pipeline schedule, or None;
    `tied_group`: the ranks holding the two copies of a tied embedding, or None."""

    chunks: list[tuple[int, GPT]]
    models: list[torch.nn.Module]
    optimizers: list[torch.optim.Optimizer]
    streams: DropoutStreams | None
    pipeline: object | None
    tied_group: object | None
    num_parameters: int

    def state_dict(self) -> dict:
        """Weights and optimizer state of every stage on this rank, keyed by parameter name, never by layout."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optim_state = {}, {}
        for model, optimizer in zip(self.models, self.optimizers, strict=True):
            m, o = get_state_dict(model, optimizer)
            model_state.update(m)
            optim_state.update(o["state"])
        return {"model": model_state, "optimizer_state": optim_state}

    def load(self, read: Callable[[dict], dict], full: bool, weights_only: bool) -> None:
        """Each stage's weights (and unless `weights_only`, its optimizer state) from storage. `read` fills a
        template of tensors shaped for this layout, as torch.distributed.checkpoint loads in place; `full`:
        the storage holds whole tensors (one file) rather than shards."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_state_dict,
            set_model_state_dict,
            set_state_dict,
        )

        options = StateDictOptions(full_state_dict=full)
        for model, optimizer in zip(self.models, self.optimizers, strict=True):
            if weights_only:
                model_state = read({"model": get_model_state_dict(model, options=options)})["model"]
                set_model_state_dict(model, model_state, options=options)
                continue
            model_state, optim_state = get_state_dict(model, optimizer, options=options)
            loaded = read({"model": model_state, "optimizer_state": optim_state["state"]})
            set_state_dict(model, optimizer, model_state_dict=loaded["model"], options=options,
                           optim_state_dict={"state": loaded["optimizer_state"], "param_groups": optim_state["param_groups"]})


def build_model_parts(config: TrainConfig, model_config, dims, mesh, device: torch.device, dtype,
                      micro_batches: int, seq_len: int, say: Callable[[str], None]) -> ModelParts:
    """The model, cut into this rank's pipeline stages (one without pipeline parallelism), each split over
    the tensor-parallel group and wrapped for data parallelism, with one optimizer per stage. `mesh`: the
    ("pp", "dp", "tp") mesh, or None for one process; `dtype`: autocast's, or None."""
    pp_rank = mesh["pp"].get_local_rank() if mesh is not None else 0
    # Built on the meta device: no storage until each rank materializes the parts it holds, so a model
    # that fits once sharded never has to fit whole. The weights are those of one process in any layout.
    with torch.device("meta"):
        model = GPT(model_config)
    num_parameters = model.num_parameters()
    model.set_recompute(config.recompute)
    torch.manual_seed(config.seed)  # the default stream dropout draws from
    streams = DropoutStreams(device, config.seed, mesh["tp"].get_local_rank(), pp_rank,
                             pipeline=dims.pp > 1) if dims.tp > 1 or dims.pp > 1 else None
    if config.compiles_on(device.type):
        compile_blocks(model, device, say, dims.tp)
    chunks = split_stages(model, pp_rank, dims.pp, dims.virtual, dtype) if dims.pp > 1 else [(0, model)]
    # DDP holds no DTensors and cannot skip the gradient reduce of a pipeline's earlier micro-batches,
    # so data parallelism combined with tensor or pipeline parallelism is FSDP2's.
    sharded = dims.dp > 1 and (config.use_distributed_optimizer or dims.tp > 1 or dims.pp > 1)
    models = []
    for _, chunk in chunks:
        if dims.tp > 1:
            apply_tensor_parallel(chunk, mesh["tp"], config.sequence_parallel)
            use_dropout_streams(chunk, streams, config.sequence_parallel)
        if sharded:  # FSDP2 shards the meta model; materialize then allocates only this rank's shards
            apply_data_parallel(chunk, mesh["dp"], True, config.overlap_grad_reduce, dtype)
        chunk.materialize(device, config.seed)
        if dims.dp > 1 and not sharded:  # DDP wraps a model with storage (it broadcasts rank 0's weights)
            models.append(apply_data_parallel(chunk, mesh["dp"], False, config.overlap_grad_reduce))
        else:
            models.append(chunk)
    optimizers = [make_optimizer(list(chunk.parameters()), config.lr, config.weight_decay,
                                 (config.adam_beta1, config.adam_beta2), config.adam_eps) for _, chunk in chunks]
    pipeline = tied_group = None
    if dims.pp > 1:
        pipeline = build_schedule(chunks, models, dims.pp * dims.virtual, mesh["pp"], device, micro_batches,
                                  config.micro_batch_size, seq_len, dims.tp if config.sequence_parallel else 1, dtype)
        if model_config.tie_embeddings:
            tied_group = embedding_group(mesh)
    return ModelParts(chunks, models, optimizers, streams, pipeline, tied_group, num_parameters)


def compile_unavailable(device: torch.device, tensor_parallel: int = 1) -> str | None:
    """Why torch.compile cannot run here, or None: inductor builds C++ kernels on a CPU and Triton kernels
    on a GPU; and on CPUs (gloo, torch 2.13) dynamo hands DTensor's redistribution in a tensor-parallel
    block a plain-tensor gradient, which fails in the first backward pass (untested on GPUs here)."""
    if device.type == "cpu" and not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")):
        return "inductor needs a C compiler on a CPU and none was found"
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        return "inductor needs Triton on a GPU and it is not installed"
    if device.type == "cpu" and tensor_parallel > 1:
        return "tensor-parallel blocks do not compile on CPUs (their first backward pass fails in DTensor)"
    return None


def compile_blocks(model: GPT, device: torch.device, say: Callable[[str], None], tensor_parallel: int = 1) -> None:
    """--compile: each transformer block compiled in place (its parameter names unchanged), as torchtitan
    does, so recomputation, DDP and FSDP2 wrap compiled blocks; where they cannot compile, one warning and
    eager blocks."""
    why = compile_unavailable(device, tensor_parallel)
    if why:
        say(f"textmill train: warning: --compile: {why}; training without compilation")
        return
    for block in model.blocks.values():
        block.compile()
