"""The demo's training step on a busy machine: torch's default threads against the threads the demo now takes (the
free cores, `textmill.demo.run.free_cores`), beside the same step on the idle machine.

    python benchmarks/bench_busy.py [--hogs 2] [--steps 30]

The step is the demo's: the tiny GPT preset, sequences of 128 tokens, two micro-batches of 8 (global batch 16),
forward, backward, clipping and AdamW, on random tokens of a 2,048-token vocabulary. First idle, then with --hogs
processes each spinning on one core (started a minute before, so the load average the demo reads has risen): the
median step of each, and each busy one's ratio to the idle one. A machine that lost its whole CPU to two hogs on two
cores would at worst double a step's time if threads shared fairly; the default threads did much worse.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import time

import torch

from textmill.demo.run import free_cores
from textmill.trainer.gpt_config import GPTConfig, PRESETS
from textmill.trainer.model import GPT
from textmill.trainer.optim import make_optimizer


def spin() -> None:
    while True:
        pass


def median_step(threads: int, steps: int) -> float:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=2048, **{**PRESETS["tiny"], "max_position_embeddings": 128}))
    optimizer = make_optimizer(list(model.parameters()), 3e-3, 0.01, (0.9, 0.999), 1e-8)
    tokens = torch.randint(0, 2048, (2, 8, 129))
    times = []
    for step in range(steps + 2):
        started = time.perf_counter()
        for micro in tokens:
            (model(micro[:, :-1], micro[:, 1:]) / 2).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= 2:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hogs", type=int, default=2, help="processes spinning on a core each while the busy steps run")
    parser.add_argument("--steps", type=int, default=30, help="steps timed (after two warm-up steps)")
    parser.add_argument("--settle", type=float, default=60.0, help="seconds the hogs run before the busy steps")
    args = parser.parse_args()
    default = torch.get_num_threads()
    idle = median_step(default, args.steps)
    hogs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    try:
        time.sleep(args.settle)
        fitted = free_cores()
        busy_default = median_step(default, args.steps)
        busy_fitted = median_step(fitted, args.steps)
    finally:
        for hog in hogs:
            hog.kill()
    print(f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; load average "
          f"{os.getloadavg()[0]:.1f} at the end; median of {args.steps} steps")
    print("| machine | threads | ms a step | against idle |")
    print("|---|---:|---:|---:|")
    print(f"| idle | {default} (torch's default) | {1e3 * idle:.1f} | 1.00x |")
    print(f"| {args.hogs} hogs | {default} (torch's default) | {1e3 * busy_default:.1f} | {busy_default / idle:.2f}x |")
    print(f"| {args.hogs} hogs | {fitted} (free_cores, as the demo takes) | {1e3 * busy_fitted:.1f} | "
          f"{busy_fitted / idle:.2f}x |")


if __name__ == "__main__":
    main()
