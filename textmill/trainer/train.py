"""`textmill train`: Megatron's pretrain_gpt.py for one process (arguments named as Megatron names them).

One iteration = one global batch = `global_batch_size / micro_batch_size` micro-batches whose gradients
accumulate; then gradient clipping, one AdamW step at the scheduled learning rate. Sample k of the
training split is used at iteration k // global_batch_size, so the data position of a checkpoint is its
iteration, and a resumed run sees exactly the samples an uninterrupted one would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np
import torch

from textmill.errors import Interrupted, TextmillError
from textmill.io.progress import progress
from textmill.trainer.checkpoint import checkpoint_model_config, is_writer
from textmill.trainer.checkpointer import Checkpointer, CheckpointSettings
from textmill.trainer.device import device_peak_tflops, pick_device, require_torch
from textmill.trainer.metrics import MetricSinks
from textmill.trainer.model import training_flops
from textmill.trainer.offload import ActivationOffload
from textmill.trainer.optim import LRSchedule
from textmill.trainer.parallel.data_parallel import gradient_sync
from textmill.trainer.parallel.dims import distributed_session, torchrun, world_from_env
from textmill.trainer.parallel.pipeline_parallel import sync_tied_embedding
from textmill.trainer.parts import build_model_parts, training_data
from textmill.trainer.train_config import TrainConfig, check_config, unpadded_vocab_size


@dataclass
class TrainState:
    iteration: int = 0
    skipped: int = 0
    log: list = field(default_factory=list)


class CheckedSettings(NamedTuple):
    """What check_config makes of a TrainConfig in a world of processes (checked once per process)."""

    vocab_size: int  # the tokenizer's
    model_vocab_size: int  # the embedding rows that are tokens: the tokenizer's, or a loaded model's (GPT-J: 50400)
    model_config: object  # GPTConfig
    dims: object  # ParallelDims
    seq_len: int
    loaded: dict | None  # the checkpoint --use-checkpoint-args read the model's shape from


def checked_settings(config: TrainConfig, world: int) -> CheckedSettings:
    vocab_size = unpadded_vocab_size(config)
    model_vocab_size, model, loaded = vocab_size, None, None
    if config.use_checkpoint_args:  # the model's shape from the checkpoint at --load, not from the flags
        model, model_vocab_size, loaded = checkpoint_model_config(config, vocab_size)
    model_config, dims, seq_len = check_config(config, world, vocab_size, model)
    return CheckedSettings(vocab_size, model_vocab_size, model_config, dims, seq_len, loaded)


def prepare_device(config: TrainConfig, device: torch.device, dtype, say) -> float | None:
    """Set the CPU threads and the device's matmul precision as the flags ask; its peak TFLOP/s (for MFU), or
    None when unknown."""
    if config.cpu_threads:
        torch.set_num_threads(config.cpu_threads)
    if device.type == "cuda":
        torch.set_float32_matmul_precision("highest" if config.no_tf32 else "high")
        if config.no_tf32 and dtype is None:
            say("textmill train: warning: fp32 products in full fp32 (--no-tf32, no --bf16): the slowest way to train "
                "on this GPU")
    return device_peak_tflops(device, config.peak_tflops, dtype)


def optimization(config: TrainConfig, device: torch.device) -> tuple[LRSchedule, torch.amp.GradScaler]:
    """The learning-rate schedule and the loss scaler (a no-op unless --fp16)."""
    decay = config.lr_decay_iters or config.train_iters
    warmup = int(config.lr_warmup_fraction * decay) if config.lr_warmup_fraction is not None else config.lr_warmup_iters
    scaler = torch.amp.GradScaler(device.type, init_scale=config.initial_loss_scale,
                                  growth_interval=config.loss_scale_window, enabled=config.fp16)
    return LRSchedule(config.lr, config.min_lr, warmup, decay, config.lr_decay_style), scaler


def checkpoint_settings(config: TrainConfig, checked: CheckedSettings, rank: int) -> CheckpointSettings:
    dims = checked.dims
    record = {"model_config": checked.model_config.to_dict(), "args": config.to_dict(), "seq_length": checked.seq_len,
              "vocab_size": checked.model_vocab_size, "tokenizer_vocab_size": checked.vocab_size,
              "parallel": dims.to_dict()}
    return CheckpointSettings(
        save=config.save, format=config.ckpt_format or ("torch_dist" if dims.distributed or config.async_save else "torch"),
        async_save=config.async_save, finetune=config.finetune, no_load_optim=config.no_load_optim,
        no_load_rng=config.no_load_rng, tokenizer=(config.vocab_file, config.merge_file, config.tokenizer_model),
        rank=rank, world=dims.world, vocab_size=checked.vocab_size, model_config=checked.model_config, record=record)


def checkpoint_group(config: TrainConfig, dims):
    """A background save coordinates the ranks over a group of its own, never interleaved with training's
    collectives; None where there is no background save or one process."""
    return torch.distributed.new_group(backend="gloo") if config.async_save and dims.distributed else None


class Trainer:
    def __init__(self, config: TrainConfig, mesh=None, checked: CheckedSettings | None = None):
        """`mesh`: the ("pp", "dp", "tp") mesh of the distributed session (`run` makes it); None for one process.
        `checked`: the settings as training_session checked them (checked here when not given)."""
        self.config = config
        world, self.rank, local_rank = world_from_env()
        self.device = pick_device(config.device, local_rank)
        checked = checked or checked_settings(config, world)
        self.vocab_size, self.model_vocab_size = checked.vocab_size, checked.model_vocab_size
        self.model_config, self.dims, self.seq_len = checked.model_config, checked.dims, checked.seq_len
        if self.dims.distributed and mesh is None:
            raise TextmillError("several processes need the mesh of a distributed session (textmill train makes it)")
        self.mesh = mesh
        self.dp_rank = mesh["dp"].get_local_rank() if mesh is not None else 0
        self.pp_rank = mesh["pp"].get_local_rank() if mesh is not None else 0
        self.dtype = torch.bfloat16 if config.bf16 else torch.float16 if config.fp16 else None  # autocast's
        self.peak = prepare_device(config, self.device, self.dtype, self.say)
        self.state = TrainState()

        self.train_data, self.valid_data = training_data(config, self.seq_len, self.vocab_size, self.dims.distributed)
        self.parts = build_model_parts(config, self.model_config, self.dims, mesh, self.device, self.dtype,
                                       self.micro_batches_per_step(), self.seq_len, self.say)
        self.schedule, self.scaler = optimization(config, self.device)
        self.checkpointer = Checkpointer(checkpoint_settings(config, checked, self.rank), self.say,
                                         checkpoint_group(config, self.dims))
        if config.load:
            self.checkpointer.load(config.load, self.parts, self, checked.loaded)
        self.checkpointer.check_save_folder(self.state.iteration)

    def micro_batches_per_step(self) -> int:
        return self.config.global_batch_size // (self.config.micro_batch_size * self.dims.dp)

    # -- checkpoints -------------------------------------------------------------------------------
    def save(self) -> Path:
        return self.checkpointer.save(self.state.iteration, self.parts, self)

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the run besides the model's parts: its iteration and the samples consumed
        (its data position), skipped steps, the loss scale, and this rank's random state under "rng"."""
        rng = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        if self.parts.streams is not None:
            rng.update(self.parts.streams.state_dict())
        return {"iteration": self.state.iteration, "skipped_iterations": self.state.skipped,
                "consumed_samples": self.state.iteration * self.config.global_batch_size,
                "grad_scaler": self.scaler.state_dict(), "rng": rng}

    def load_state_dict(self, state: dict) -> None:
        """Whatever of state_dict's entries `state` holds (a checkpoint's load leaves some out: the checkpointer)."""
        if "grad_scaler" in state:
            self.scaler.load_state_dict(state["grad_scaler"])
        if "iteration" in state:
            self.state.iteration = state["iteration"]
            self.state.skipped = state.get("skipped_iterations", 0)
        rng = state.get("rng")
        if rng is not None:
            torch.set_rng_state(rng["torch"])
            if "cuda" in rng:
                torch.cuda.set_rng_state(rng["cuda"], self.device)
            if "tensor_parallel" in rng:
                self.parts.streams.load_state_dict(rng)

    def say(self, text: str) -> None:
        if is_writer():
            print(text, flush=True)

    # -- steps -------------------------------------------------------------------------------------
    def batch(self, dataset, start: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.from_numpy(np.stack([dataset[i] for i in range(start, start + size)]))
        if self.device.type == "cuda":  # from pinned memory the copy is asynchronous (from pageable, it waits)
            rows = rows.pin_memory()
        x = rows.to(self.device, non_blocking=True)
        return x[:, :-1], x[:, 1:]

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def offload(self):
        """With --cpu-offload-activations, what the forward pass saves for the backward pass waits in (pinned)
        host memory instead of on the GPU, copied there on a stream of its own, and comes back when the backward
        pass needs it."""
        if not self.config.cpu_offload_activations:
            return contextlib.nullcontext()
        return ActivationOffload(self.device)

    def micro_batches(self, dataset, first: int, count: int):
        """(tokens, labels) of this rank's micro-batches among samples [first, first + count): each
        round of micro_batch x DP samples is dealt out to the data-parallel ranks in order, as Megatron's
        sampler does, so the global batch is the same whatever the layout."""
        micro, dp = self.config.micro_batch_size, self.dims.dp
        for start in range(first, first + count, micro * dp):
            yield self.batch(dataset, start + self.dp_rank * micro, micro)

    def mean_over_data_parallel(self, value: torch.Tensor) -> torch.Tensor:
        """The mean over the data-parallel ranks, left on the device (read when logged: no host sync a step)."""
        if self.dims.dp > 1:
            torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.AVG, group=self.mesh["dp"].get_group())
        return value

    def train_step(self) -> dict:
        config, it = self.config, self.state.iteration
        for model in self.parts.models:
            model.train()
        first = it * config.global_batch_size
        if self.parts.pipeline is not None:
            loss = self.pipeline_pass(self.train_data, first, train=True)
        else:
            steps = self.micro_batches_per_step()
            total = torch.zeros((), device=self.device)
            for m, (tokens, labels) in enumerate(self.micro_batches(self.train_data, first, config.global_batch_size)):
                with gradient_sync(self.parts.models[0], m == steps - 1), self.autocast(), self.offload():
                    loss = self.parts.models[0](tokens, labels) / steps
                    self.scaler.scale(loss).backward()
                total += loss.detach()
            loss = self.mean_over_data_parallel(total)
        for optimizer in self.parts.optimizers:
            self.scaler.unscale_(optimizer)
        grad_norm = self.clip_gradients()
        lr = self.schedule.lr(it)
        scale = self.scaler.get_scale()
        for optimizer in self.parts.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = lr
            self.scaler.step(optimizer)  # skipped by the scaler when fp16 gradients hold inf/NaN
        self.scaler.update()
        skipped = config.fp16 and self.scaler.get_scale() < scale
        for optimizer in self.parts.optimizers:
            optimizer.zero_grad(set_to_none=True)
        self.state.iteration += 1
        self.state.skipped += int(skipped)
        return {"loss": loss, "lr": lr, "grad_norm": grad_norm, "skipped": bool(skipped),
                "loss_scale": scale if config.fp16 else None}

    def pipeline_pass(self, dataset, first: int, train: bool) -> torch.Tensor:
        """One global batch through the pipeline schedule: this rank's micro-batches go in together and the
        schedule runs them (1F1B); the loss comes out of the last stage and is shared with the others."""
        pairs = list(self.micro_batches(dataset, first, self.config.global_batch_size))
        tokens, labels = torch.cat([t for t, _ in pairs]), torch.cat([y for _, y in pairs])
        losses: list[torch.Tensor] = []
        inputs = (tokens,) if self.pp_rank == 0 else ()
        with self.autocast(), self.offload():
            run = self.parts.pipeline.step if train else self.parts.pipeline.eval
            run(*inputs, target=labels, losses=losses, labels=labels)
        if train and self.parts.tied_group is not None:
            sync_tied_embedding(self.parts.chunks, self.dims.pp * self.dims.virtual, self.parts.tied_group)
        total = torch.stack(losses).float().mean() if losses else torch.zeros((), device=self.device)
        torch.distributed.all_reduce(total, group=self.mesh["pp"].get_group())  # only the last stage had it
        return self.mean_over_data_parallel(total)

    def clip_gradients(self) -> torch.Tensor:
        """Scale all gradients so their global L2 norm is at most --clip-grad; the norm before. Gradients are
        taken in groups of one kind (plain, or DTensors on one mesh: the foreach kernels take no mixture),
        sharded norms are made whole, the squares summed over the groups and the pipeline stages, with the
        second copy of a tied embedding left out."""
        from torch.distributed.tensor import DTensor

        counted, every = {}, {}
        for s, chunk in self.parts.chunks:
            for name, p in chunk.named_parameters():
                if p.grad is not None:
                    kind = p.device_mesh if isinstance(p, DTensor) else None
                    every.setdefault(kind, []).append(p)
                    if not (s != 0 and name == "wte.weight"):
                        counted.setdefault(kind, []).append(p.grad)
        squares = torch.zeros((), device=self.device)
        for grads in counted.values():
            norm = torch.nn.utils.get_total_norm(grads, 2.0, foreach=True)
            squares += (norm.full_tensor() if isinstance(norm, DTensor) else norm) ** 2
        if self.dims.pp > 1:
            torch.distributed.all_reduce(squares, group=self.mesh["pp"].get_group())
        norm = squares.sqrt()
        if self.config.clip_grad > 0:
            for params in every.values():
                torch.nn.utils.clip_grads_with_norm_(params, self.config.clip_grad, norm, foreach=True)
        return norm

    @torch.no_grad()
    def evaluate(self) -> float | None:
        """Mean loss over the first --eval-iters global batches of the validation split (the same
        samples every time, so successive values compare)."""
        if self.valid_data is None:
            return None
        for model in self.parts.models:
            model.eval()
        gb = self.config.global_batch_size
        if self.parts.pipeline is not None:
            return torch.stack([self.pipeline_pass(self.valid_data, i * gb, train=False)
                                for i in range(self.config.eval_iters)]).mean().item()
        total, count = torch.zeros((), device=self.device), 0
        for tokens, labels in self.micro_batches(self.valid_data, 0, self.config.eval_iters * gb):
            with self.autocast():
                total += self.parts.models[0](tokens, labels).float()
            count += 1
        return self.mean_over_data_parallel(total / count).item()

    # -- the loop ----------------------------------------------------------------------------------
    def train(self) -> dict:
        config = self.config
        rank0 = is_writer()  # rank 0 prints and logs
        sinks = MetricSinks(config, rank0)
        tokens_per_iter = config.global_batch_size * self.seq_len
        flops_per_iter = training_flops(self.model_config, config.global_batch_size, self.seq_len)
        layout = f" x {self.dims.world} processes ({self.dims.describe(config)})" if self.dims.distributed else ""
        vocab = f"vocab {self.vocab_size}"
        if self.model_vocab_size != self.vocab_size:  # a model with spare rows (GPT-J: 50400 for 50257 tokens)
            vocab += f" (the model's {self.model_vocab_size})"
        self.say(f"textmill train: {self.parts.num_parameters:,} parameters, {self.model_config.num_layers} layers, "
                 f"hidden {self.model_config.hidden_size}, {vocab} padded to {self.model_config.vocab_size}, "
                 f"{len(self.train_data):,} training samples of {self.seq_len} tokens on {self.device}"
                 + (f" ({torch.get_num_threads()} thread{'s' * (torch.get_num_threads() != 1)})"
                    if self.device.type == "cpu" else "") + layout
                 + (f"; resuming at iteration {self.state.iteration}" if self.state.iteration else ""))
        bar = progress(total=config.train_iters, initial=self.state.iteration, unit="it", desc="train", leave=False,
                       enabled=rank0)  # a line every TEXTMILL_PROGRESS_S seconds without a terminal
        window, window_start, last_valid = [], time.perf_counter(), None
        saved_at = None
        try:
            while self.state.iteration < config.train_iters:
                step = self.train_step()
                window.append(step)
                it = self.state.iteration
                bar.update(1)
                if step["skipped"] and rank0:
                    print(f" iteration {it}: fp16 gradients overflowed; step skipped, loss scale now "
                          f"{self.scaler.get_scale():.0f}", flush=True)
                record = None
                if it % config.log_interval == 0 or it == config.train_iters:
                    seconds = (time.perf_counter() - window_start) / len(window)
                    loss = torch.stack([s["loss"] for s in window]).mean().item()  # the window's one host sync
                    tflops = flops_per_iter / seconds / 1e12
                    record = {"iteration": it, "lm_loss": loss, "lr": step["lr"], "grad_norm": step["grad_norm"].item(),
                              "tokens_per_s": tokens_per_iter / seconds, "tflops": tflops,
                              "mfu": tflops / (self.peak * self.dims.world) if self.peak else None,
                              "skipped_iterations": self.state.skipped,
                              "ms_per_iter": 1000 * seconds}
                    if step["loss_scale"] is not None:
                        record["loss_scale"] = step["loss_scale"]
                    window, window_start = [], time.perf_counter()
                if it % config.eval_interval == 0 or it == config.train_iters:
                    last_valid = self.evaluate()
                    record = {**(record or {"iteration": it}), "valid_loss": last_valid}
                    window_start = time.perf_counter()  # evaluation time is not training time
                if record and rank0:
                    self.log(record, bar)
                    sinks.write(record)
                stop = bool(config.exit_interval) and it % config.exit_interval == 0
                interval = config.save_interval and it % config.save_interval == 0
                if config.save and (interval or it == config.train_iters or stop):
                    self.save()
                    saved_at = it
                if stop:
                    break
            self.checkpointer.finish()
        except KeyboardInterrupt:
            raise Interrupted(self.where_it_stopped()) from None
        finally:
            bar.close()
            sinks.close()
        return {"iterations": self.state.iteration, "valid_loss": last_valid, "skipped_iterations": self.state.skipped,
                "saved_at": saved_at, "log": self.state.log}

    def where_it_stopped(self) -> str:
        """What an interrupted run leaves: the iteration it reached and the newest checkpoint to resume from."""
        from textmill.trainer.checkpoint import read_tracker

        reached = f"training reached iteration {self.state.iteration} of {self.config.train_iters}"
        newest = read_tracker(self.config.save) if self.config.save else None
        if newest is None:
            return f"{reached}; no checkpoint was saved" + ("" if self.config.save else " (no --save)")
        return (f"{reached}; the newest checkpoint is iteration {newest} in {self.config.save}: "
                f"--load {self.config.save} resumes from it")

    def log(self, r: dict, bar) -> None:
        self.state.log.append(r)
        parts = [f"iteration {r['iteration']:>8}/{self.config.train_iters}"]
        if "lm_loss" in r:
            parts += [f"lm loss {r['lm_loss']:.4E}", f"lr {r['lr']:.3E}", f"grad norm {r['grad_norm']:.3f}",
                      f"{r['tokens_per_s']:,.0f} tokens/s", f"{r['ms_per_iter']:.1f} ms/it",
                      f"MFU {r['mfu']:.1%}" if r["mfu"] is not None else f"{r['tflops']:.3f} TFLOP/s (MFU: no peak known)",
                      f"skipped {r['skipped_iterations']}"]
            if "loss_scale" in r:
                parts.append(f"loss scale {r['loss_scale']:.0f}")
        if r.get("valid_loss") is not None:
            parts.append(f"validation loss {r['valid_loss']:.4E} (ppl {math.exp(min(r['valid_loss'], 50)):.2f})")
        bar.write(" | ".join(parts))


@contextlib.contextmanager
def training_session(config: TrainConfig) -> Iterator[Trainer]:
    """A Trainer inside the distributed session its layout needs (one process: none)."""
    world, _, local_rank = world_from_env()
    checked = checked_settings(config, world)
    with distributed_session(checked.dims, pick_device(config.device, local_rank),
                             config.distributed_timeout_minutes) as mesh:
        yield Trainer(config, mesh, checked)


def launch(config: TrainConfig) -> None:
    """`textmill train --nproc-per-node N ...`: the same settings under torchrun on this machine (its rank 0
    prints the summary)."""
    import tempfile

    n = config.nproc_per_node
    check_config(config, n, unpadded_vocab_size(config))
    with tempfile.TemporaryDirectory(prefix="textmill-train-") as folder:  # the workers' settings, typed
        settings = dataclasses.replace(config, nproc_per_node=1).write(Path(folder) / "train.json")
        torchrun(n, ["-m", "textmill.cli.train_process", str(settings)])


def run(config: TrainConfig) -> dict | None:
    """Train as the config says: here, or under torchrun for several processes on this machine. The
    result (iterations, last validation loss, last checkpoint) on the rank that writes; None on the others."""
    require_torch()
    if config.nproc_per_node > 1 and world_from_env()[0] == 1:
        return launch(config)  # one process needs no torchrun: it runs here
    with training_session(config) as trainer:
        result = trainer.train()
        writer = is_writer()
    return result if writer else None
