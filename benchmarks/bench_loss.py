"""The language-model loss of an evaluation (under torch.no_grad, parameters that require gradients), as
textmill computed it before (its gradients too: inside an autograd Function grad mode is always off, so
the loss could not tell) and as it does now (the loss alone), in one run.

    python benchmarks/bench_loss.py [--tokens N] [--hidden H] [--vocab V] [--repeats R] [--device cpu|cuda]

The two ways alternate, repeat by repeat, so drift on a shared machine hits both alike; the table gives the
median of each and their ratio.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from datetime import date

import torch

from textmill.trainer.loss import LanguageModelLoss


def timed(fn, device: torch.device) -> float:
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2048, help="positions in the batch (batch x sequence)")
    parser.add_argument("--hidden", type=int, default=768, help="hidden size (GPT-2 124M: 768)")
    parser.add_argument("--vocab", type=int, default=50304, help="vocabulary (GPT-2's, padded: 50304)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats of each way, after one warm-up")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.tokens, args.hidden, generator=g).to(device)
    weight = torch.nn.Parameter((0.02 * torch.randn(args.vocab, args.hidden, generator=g)).to(device))
    labels = torch.randint(0, args.vocab, (args.tokens,), generator=g).to(device)
    mask = torch.ones(args.tokens, device=device)

    def loss(with_gradients: bool):
        with torch.no_grad():
            return LanguageModelLoss.apply(hidden, weight, None, labels, mask, None, 0, with_gradients)

    assert torch.equal(loss(True), loss(False))  # the same loss either way
    times = {True: [], False: []}
    for _ in range(args.repeats):
        for way in (True, False):
            times[way].append(timed(lambda way=way: loss(way), device))
    before, now = statistics.median(times[True]), statistics.median(times[False])
    print(f"Run {date.today()} on {platform.machine()} ({platform.processor() or 'unknown CPU'}), "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}, device {device}")
    print(f"Evaluation loss of {args.tokens} positions, hidden {args.hidden}, vocabulary {args.vocab}, median of {args.repeats}:")
    print("| way | ms | ratio to before |")
    print("|---|---:|---:|")
    print(f"| before: gradients computed under no_grad | {1000 * before:.0f} | 1.00 |")
    print(f"| now: the loss alone | {1000 * now:.0f} | {now / before:.2f} |")


if __name__ == "__main__":
    main()
