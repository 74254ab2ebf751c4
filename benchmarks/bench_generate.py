"""Generation speed: tokens/s with and without the key/value cache, server latency under 50 clients, and
under 60 heavy requests whose clients hung up.

    python benchmarks/bench_generate.py [--preset gpt2-124m] [--prompt-tokens 32] [--new-tokens 64]

A randomly initialised model of the preset with the real GPT-2 vocabulary (tests/data) is saved as a
checkpoint. Part 1 generates greedily from prompts of --prompt-tokens tokens, batch 1 and batch 8, with
the cache and recomputing the whole prefix for every token; the ratio is against the uncached run of the
same batch. Part 2 starts `textmill serve` on 127.0.0.1, measures one client's request latency, then 50
clients sending one request each at the same moment; ratios are against the single client's median.
Part 3 sends --abandoned heavy requests (8 prompts, --heavy-tokens new tokens each) on sockets closed at
once without reading, then one ordinary request; its latency is against the single client's median.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from textmill.demo import synthweb
from textmill.inference.generate import SamplingParams, TokenText, generate
from textmill.tokenizers.gpt2 import GPT2Tokenizer, padded_vocab_size
from textmill.trainer.checkpoint import save_checkpoint
from textmill.trainer.gpt_config import PRESETS, GPTConfig
from textmill.trainer.model import GPT

TEST_DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def make_checkpoint(root: Path, preset: str) -> tuple[GPT, GPT2Tokenizer]:
    tokenizer = GPT2Tokenizer(TEST_DATA / "gpt2-vocab.json", TEST_DATA / "gpt2-merges.txt")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=padded_vocab_size(tokenizer.vocab_size), **PRESETS[preset])).eval()
    (root / "tokenizer").mkdir(parents=True)
    for src, name in zip(tokenizer.files, ("vocab.json", "merges.txt"), strict=True):
        (root / "tokenizer" / name).write_bytes(src.read_bytes())
    save_checkpoint(root, "release", {"model_config": model.config.to_dict(), "vocab_size": tokenizer.vocab_size},
                    {"model": model.state_dict()})
    return model, tokenizer


def prompts(tokenizer, count: int, length: int) -> list[list[int]]:
    rng = random.Random(0)
    return [tokenizer.encode(" ".join(synthweb.prose(rng, 2)))[:length] for _ in range(count)]


def tokens_per_second(model, text, batch: list[list[int]], new_tokens: int, use_cache: bool) -> float:
    params = SamplingParams(tokens_to_generate=new_tokens, top_k=1, use_cache=use_cache)
    started = time.perf_counter()
    out = generate(model, text, batch, params, text.tokenizer.eod)
    return sum(len(g.generated) for g in out) / (time.perf_counter() - started)


def put(url: str, body: dict) -> float:
    req = urllib.request.Request(url + "/api", data=json.dumps(body).encode(), method="PUT")
    started = time.perf_counter()
    with urllib.request.urlopen(req, timeout=3600) as r:
        assert r.status == 200, r.read()
        r.read()
    return time.perf_counter() - started


def server_latency(root: Path, tokenizer, prompt_tokens: int, new_tokens: int, clients: int, abandoned: int,
                   heavy_tokens: int) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "textmill.cli", "serve", "--load", str(root), "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        address = re.search(r"http://(127\.0\.0\.1):(\d+)", proc.stdout.readline()).groups()
        url = f"http://{address[0]}:{address[1]}"
        texts = [tokenizer.decode(p) for p in prompts(tokenizer, clients, prompt_tokens)]
        body = lambda i: {"prompts": [texts[i]], "tokens_to_generate": new_tokens, "top_k": 1}  # noqa: E731
        put(url, body(0))  # warm-up
        single = statistics.median(put(url, body(i)) for i in range(5))
        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            latencies = sorted(pool.map(lambda i: put(url, body(i)), range(clients)))
        wall = time.perf_counter() - started
        heavy = json.dumps({"prompts": texts[:8], "tokens_to_generate": heavy_tokens, "top_k": 1}).encode()
        sockets = [socket.create_connection((address[0], int(address[1]))) for _ in range(abandoned)]
        for sock in sockets:
            sock.sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(heavy), heavy))
        for sock in sockets:
            sock.close()
        after_abandoned = put(url, body(1))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"single": single, "p50": statistics.median(latencies), "p95": latencies[int(0.95 * (clients - 1))],
            "max": latencies[-1], "wall": wall, "after_abandoned": after_abandoned}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="gpt2-124m", choices=sorted(PRESETS), help="model size")
    ap.add_argument("--prompt-tokens", type=int, default=32, help="tokens per prompt")
    ap.add_argument("--new-tokens", type=int, default=64, help="tokens generated per prompt in part 1")
    ap.add_argument("--server-new-tokens", type=int, default=16, help="tokens generated per request in part 2")
    ap.add_argument("--clients", type=int, default=50, help="concurrent clients in part 2")
    ap.add_argument("--abandoned", type=int, default=60, help="heavy requests whose clients hang up, in part 3")
    ap.add_argument("--heavy-tokens", type=int, default=128, help="tokens generated per prompt of a heavy request")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ckpt"
        model, tokenizer = make_checkpoint(root, args.preset)
        text = TokenText(tokenizer)
        print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}; "
              f"{args.preset} ({model.num_parameters() / 1e6:.0f}M parameters), fp32, prompts of {args.prompt_tokens} tokens")
        print(f"\n## Greedy generation, {args.new_tokens} new tokens per prompt\n")
        print("| batch | KV cache | tokens/s | ratio |\n|---:|---|---:|---:|")
        for batch in (1, 8):
            batch_prompts = prompts(tokenizer, batch, args.prompt_tokens)
            tokens_per_second(model, text, batch_prompts, 4, True)  # warm-up
            plain = tokens_per_second(model, text, batch_prompts, args.new_tokens, False)
            cached = tokens_per_second(model, text, batch_prompts, args.new_tokens, True)
            print(f"| {batch} | no | {plain:,.1f} | 1.00 |")
            print(f"| {batch} | yes | {cached:,.1f} | {cached / plain:.2f} |", flush=True)

        r = server_latency(root, tokenizer, args.prompt_tokens, args.server_new_tokens, args.clients, args.abandoned,
                           args.heavy_tokens)
        print(f"\n## `textmill serve`, greedy, {args.server_new_tokens} new tokens per request\n")
        print("| load | latency s | ratio |\n|---|---:|---:|")
        print(f"| 1 client (median of 5) | {r['single']:.3f} | 1.00 |")
        for key in ("p50", "p95", "max"):
            print(f"| {args.clients} clients at once, {key} | {r[key]:.3f} | {r[key] / r['single']:.1f} |")
        print(f"| after {args.abandoned} heavy requests whose clients hung up (8 prompts x {args.heavy_tokens} tokens) | "
              f"{r['after_abandoned']:.3f} | {r['after_abandoned'] / r['single']:.1f} |")
        print(f"\n{args.clients} requests answered in {r['wall']:.1f} s ({args.clients / r['wall']:.1f} requests/s; "
              f"one client alone: {1 / r['single']:.1f} requests/s)")


if __name__ == "__main__":
    main()
