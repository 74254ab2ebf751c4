"""Memory per rank and data-parallel scaling of `textmill train` on this machine's CPUs (gloo).

Every configuration trains the same model for a few steps, each as real torchrun processes (textmill's
trainer, not a copy of it), and each rank reports:
- model-state memory: the bytes of the parameters, gradients and AdamW state it holds (its shards only),
  counted exactly from its local tensors;
- peak memory: the growth of its peak resident set from just before the model is built to the end;
- tokens/s of the whole run (all ranks), median step.
Ratios are against the one-process run measured in the same invocation (the machine is shared and
noisy; absolute numbers drift).

    python benchmarks/bench_parallel.py            # prints the tables
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MEMORY_MODEL = dict(num_layers=4, hidden_size=1024, num_attention_heads=16, seq_length=256, max_position_embeddings=256,
                    micro_batch_size=2, global_batch_size=4)
SPEED_MODEL = dict(num_layers=4, hidden_size=256, num_attention_heads=8, seq_length=128, max_position_embeddings=128,
                   micro_batch_size=4, global_batch_size=16)
ACTIVATION_MODEL = dict(num_layers=4, hidden_size=512, num_attention_heads=8, seq_length=1024, max_position_embeddings=1024,
                        micro_batch_size=4, global_batch_size=4)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(out: Path, settings: dict, steps: int) -> None:
    """One rank: build the trainer, train `steps` iterations, report memory and time."""
    from textmill.trainer.train import training_session
    from textmill.trainer.train_config import TrainConfig

    settings["data_path"] = tuple(settings["data_path"])
    config = TrainConfig(**settings, train_iters=steps, eval_iters=0, eval_interval=10**9, log_interval=10**9,
                         hidden_dropout=0.0, attention_dropout=0.0)
    before = current_rss_bytes()
    with training_session(config) as trainer:
        record = measure_steps(trainer, config, steps, before)
    (out / f"rank{record['rank']}.json").write_text(json.dumps(record))


def measure_steps(trainer, config, steps: int, before: int) -> dict:
    import torch
    from torch.distributed.tensor import DTensor

    times = []
    for _ in range(steps):
        start = time.perf_counter()
        trainer.train_step()
        times.append(time.perf_counter() - start)

    def local_bytes(t):
        t = t.to_local() if isinstance(t, DTensor) else t
        return t.numel() * t.element_size()

    params = [p for _, chunk in trainer.parts.chunks for p in chunk.parameters()]
    state = sum(local_bytes(p) for p in params)
    state += sum(local_bytes(p) for p in params)  # gradients: the same shapes (freed by zero_grad after a step)
    state += sum(local_bytes(v) for opt in trainer.parts.optimizers for s in opt.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor) and v.ndim > 0)
    tokens = config.global_batch_size * trainer.seq_len
    return {"rank": int(os.environ.get("RANK", 0)), "state_bytes": state, "peak_growth": peak_rss_bytes() - before,
            "tokens_per_s": tokens / float(np.median(times[1:]))}


def measure(data: dict, nproc: int, layout: dict, model: dict, steps: int, threads: int = 1) -> list[dict]:
    settings = json.dumps(dict(data_path=[str(data["prefix"])], vocab_size=512, split="100,0,0", no_index_cache=True,
                               **model, **layout))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        if nproc == 1:
            cmd = [sys.executable, __file__, "--worker", str(out), "--steps", str(steps), "--settings", settings]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", __file__,
                   "--worker", str(out), "--steps", str(steps), "--settings", settings]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


def make_data(root: Path) -> dict:
    """Random tokens (a 512-token vocabulary) in Megatron .bin/.idx form: enough samples for any run here."""
    from textmill.megatron.indexed import IndexedDatasetWriter

    rng = np.random.default_rng(0)
    prefix = root / "random_text_document"
    writer = IndexedDatasetWriter(prefix, np.uint16)
    for _ in range(400):
        writer.add_document(rng.integers(0, 511, size=int(rng.integers(200, 2000))))
    writer.finalize()
    return {"prefix": prefix}


def mib(b: float) -> str:
    return f"{b / 2**20:,.0f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=4, help="training steps per configuration (the first is not timed)")
    p.add_argument("--settings", help=argparse.SUPPRESS)  # a worker's TrainConfig values, as JSON
    a = p.parse_args()
    if a.worker:
        return worker(a.worker, json.loads(a.settings), a.steps)

    with tempfile.TemporaryDirectory() as tmp:
        data = make_data(Path(tmp))
        print("Memory per rank (4 layers, hidden 1024, vocabulary 512, sequence 256, fp32 AdamW), max over ranks:\n")
        print("| layout | processes | model state MiB | ratio | peak growth MiB | ratio |")
        print("|---|---:|---:|---:|---:|---:|")
        base = None
        for name, nproc, layout in [("1 process", 1, {}), ("DP=2 (DDP)", 2, {}),
                                    ("DP=2, distributed optimizer", 2, dict(use_distributed_optimizer=True)),
                                    ("TP=2", 2, dict(tensor_model_parallel_size=2)),
                                    ("TP=2 + SP", 2, dict(tensor_model_parallel_size=2, sequence_parallel=True)),
                                    ("PP=2", 2, dict(pipeline_model_parallel_size=2))]:
            ranks = measure(data, nproc, layout, MEMORY_MODEL, a.steps)
            state, peak = max(r["state_bytes"] for r in ranks), max(r["peak_growth"] for r in ranks)
            base = base or (state, peak)
            print(f"| {name} | {nproc} | {mib(state)} | {state / base[0]:.2f} | {mib(peak)} | {peak / base[1]:.2f} |", flush=True)

        print("\nActivation recomputation (1 process; 4 layers, hidden 512, 4 x 1024 tokens):\n")
        print("| recompute | peak growth MiB | ratio | tokens/s | ratio |")
        print("|---|---:|---:|---:|---:|")
        base = None
        for name, recompute in [("none", None), ("selective (attention core)", "selective"), ("full (whole layers)", "full")]:
            r = measure(data, 1, dict(recompute_granularity=recompute), ACTIVATION_MODEL, a.steps, threads=2)[0]
            base = base or (r["peak_growth"], r["tokens_per_s"])
            print(f"| {name} | {mib(r['peak_growth'])} | {r['peak_growth'] / base[0]:.2f} | {r['tokens_per_s']:,.0f} | "
                  f"{r['tokens_per_s'] / base[1]:.2f} |", flush=True)

        print("\nData-parallel scaling (4 layers, hidden 256, 16 x 128 tokens per step; one thread per process):\n")
        print("| run | tokens/s | per process | scaling efficiency |")
        print("|---|---:|---:|---:|")
        one = measure(data, 1, {}, SPEED_MODEL, a.steps + 4)[0]["tokens_per_s"]
        print(f"| DP=1 | {one:,.0f} | {one:,.0f} | 1.00 |", flush=True)
        for name, layout in [("DP=2 (DDP)", {}), ("DP=2, distributed optimizer", dict(use_distributed_optimizer=True)),
                             ("DP=2 (DDP), --no-overlap-grad-reduce", dict(overlap_grad_reduce=False))]:
            two = measure(data, 2, layout, SPEED_MODEL, a.steps + 4)[0]["tokens_per_s"]
            print(f"| {name} | {two:,.0f} | {two / 2:,.0f} | {two / (2 * one):.2f} |", flush=True)


if __name__ == "__main__":
    main()
