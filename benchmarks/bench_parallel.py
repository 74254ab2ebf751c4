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

MEMORY_MODEL = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "256",
                "--max-position-embeddings", "256", "--micro-batch-size", "2", "--global-batch-size", "4"]
SPEED_MODEL = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "8", "--seq-length", "128",
               "--max-position-embeddings", "128", "--micro-batch-size", "4", "--global-batch-size", "16"]
ACTIVATION_MODEL = ["--num-layers", "4", "--hidden-size", "512", "--num-attention-heads", "8", "--seq-length", "1024",
                    "--max-position-embeddings", "1024", "--micro-batch-size", "4", "--global-batch-size", "4"]


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(out: Path, argv: list[str], steps: int) -> None:
    """One rank: build the trainer, train `steps` iterations, report memory and time."""
    from textmill.trainer.config import add_train_arguments
    from textmill.trainer.train import training_session

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    args = parser.parse_args(argv + ["--train-iters", str(steps), "--eval-iters", "0", "--eval-interval", str(10**9),
                                     "--log-interval", str(10**9), "--hidden-dropout", "0", "--attention-dropout", "0"])
    before = current_rss_bytes()
    with training_session(args) as trainer:
        record = measure_steps(trainer, args, steps, before)
    (out / f"rank{record['rank']}.json").write_text(json.dumps(record))


def measure_steps(trainer, args, steps: int, before: int) -> dict:
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

    params = [p for _, chunk in trainer.chunks for p in chunk.parameters()]
    state = sum(local_bytes(p) for p in params)
    state += sum(local_bytes(p) for p in params)  # gradients: the same shapes (freed by zero_grad after a step)
    state += sum(local_bytes(v) for opt in trainer.optimizers for s in opt.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor) and v.ndim > 0)
    tokens = args.global_batch_size * trainer.seq_len
    return {"rank": int(os.environ.get("RANK", 0)), "state_bytes": state, "peak_growth": peak_rss_bytes() - before,
            "tokens_per_s": tokens / float(np.median(times[1:]))}


def measure(data: dict, nproc: int, flags: list[str], model: list[str], steps: int, threads: int = 1) -> list[dict]:
    argv = ["--data-path", str(data["prefix"]), "--vocab-size", "512", "--split", "100,0,0", "--no-index-cache", *model, *flags]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        if nproc == 1:
            cmd = [sys.executable, __file__, "--worker", str(out), "--steps", str(steps), "--", *argv]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", __file__,
                   "--worker", str(out), "--steps", str(steps), "--", *argv]
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
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a.worker, a.rest[1:] if a.rest[:1] == ["--"] else a.rest, a.steps)

    with tempfile.TemporaryDirectory() as tmp:
        data = make_data(Path(tmp))
        print("Memory per rank (4 layers, hidden 1024, vocabulary 512, sequence 256, fp32 AdamW), max over ranks:\n")
        print("| layout | processes | model state MiB | ratio | peak growth MiB | ratio |")
        print("|---|---:|---:|---:|---:|---:|")
        base = None
        for name, nproc, flags in [("1 process", 1, []), ("DP=2 (DDP)", 2, []),
                                   ("DP=2, distributed optimizer", 2, ["--use-distributed-optimizer"]),
                                   ("TP=2", 2, ["--tensor-model-parallel-size", "2"]),
                                   ("TP=2 + SP", 2, ["--tensor-model-parallel-size", "2", "--sequence-parallel"]),
                                   ("PP=2", 2, ["--pipeline-model-parallel-size", "2"])]:
            ranks = measure(data, nproc, flags, MEMORY_MODEL, a.steps)
            state, peak = max(r["state_bytes"] for r in ranks), max(r["peak_growth"] for r in ranks)
            base = base or (state, peak)
            print(f"| {name} | {nproc} | {mib(state)} | {state / base[0]:.2f} | {mib(peak)} | {peak / base[1]:.2f} |", flush=True)

        print("\nActivation recomputation (1 process; 4 layers, hidden 512, 4 x 1024 tokens):\n")
        print("| recompute | peak growth MiB | ratio | tokens/s | ratio |")
        print("|---|---:|---:|---:|---:|")
        base = None
        for name, flags in [("none", []), ("selective (attention core)", ["--recompute-granularity", "selective"]),
                            ("full (whole layers)", ["--recompute-granularity", "full"])]:
            r = measure(data, 1, flags, ACTIVATION_MODEL, a.steps, threads=2)[0]
            base = base or (r["peak_growth"], r["tokens_per_s"])
            print(f"| {name} | {mib(r['peak_growth'])} | {r['peak_growth'] / base[0]:.2f} | {r['tokens_per_s']:,.0f} | "
                  f"{r['tokens_per_s'] / base[1]:.2f} |", flush=True)

        print("\nData-parallel scaling (4 layers, hidden 256, 16 x 128 tokens per step; one thread per process):\n")
        print("| run | tokens/s | per process | scaling efficiency |")
        print("|---|---:|---:|---:|")
        one = measure(data, 1, [], SPEED_MODEL, a.steps + 4)[0]["tokens_per_s"]
        print(f"| DP=1 | {one:,.0f} | {one:,.0f} | 1.00 |", flush=True)
        for name, flags in [("DP=2 (DDP)", []), ("DP=2, distributed optimizer", ["--use-distributed-optimizer"]),
                            ("DP=2 (DDP), --no-overlap-grad-reduce", ["--no-overlap-grad-reduce"])]:
            two = measure(data, 2, flags, SPEED_MODEL, a.steps + 4)[0]["tokens_per_s"]
            print(f"| {name} | {two:,.0f} | {two / 2:,.0f} | {two / (2 * one):.2f} |", flush=True)


if __name__ == "__main__":
    main()
