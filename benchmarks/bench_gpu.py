"""Training throughput on one GPU: textmill's GPT as `textmill train` runs it (blocks compiled on CUDA, bf16
autocast, its fused loss, torch's fused AdamW) against transformers' model of the same shape compiled
with torch.compile, under the same autocast and the same optimizer, in one run.

    python benchmarks/bench_gpu.py [--config NAME ...] [--steps N] [--warmup N] [--device cuda|cpu] [--quick]

Configurations on a GPU: GPT-2 124M and 345M (GPT2LMHeadModel) and a 1.1B LLaMA shape (TinyLlama's: GQA
with 4 key/value groups, RoPE, SwiGLU, RMSNorm; LlamaForCausalLM). On a CPU, small ones of both families.
A step is forward, loss, backward, gradient clipping and the optimizer step; the two models alternate
step by step after the warm-up (compilation happens there), so drift hits both alike. Printed per model:
median ms per step, tokens/s, MFU (model FLOPs of textmill.trainer.model.training_flops over the
device's dense bf16 peak, textmill.trainer.device), peak memory (GPU), and for textmill's step the time
by kind of kernel from torch.profiler (matrix products, attention, collectives, the rest); then each GPU
configuration against its targets: MFU (TARGET_MFU) and at least transformers' tokens/s.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import time
from datetime import date

import torch
import torch.nn.functional as F

from textmill.trainer.device import device_peak_tflops
from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.model import GPT, training_flops
from textmill.trainer.optim import make_optimizer

LLAMA = dict(position_embedding="rope", normalization="rmsnorm", activation="swiglu", tie_embeddings=False,
             bias=False)
# name: (GPTConfig keywords, micro-batch, sequence length)
GPU_CONFIGS = {
    "GPT-2 124M": (dict(vocab_size=50304, num_layers=12, hidden_size=768, num_attention_heads=12), 16, 1024),
    "GPT-2 345M": (dict(vocab_size=50304, num_layers=24, hidden_size=1024, num_attention_heads=16), 8, 1024),
    "LLaMA 1.1B": (dict(vocab_size=32000, num_layers=22, hidden_size=2048, num_attention_heads=32, num_query_groups=4,
                        ffn_hidden_size=5632, **LLAMA), 4, 2048),
}
# The MFU each GPU configuration should reach (bf16, compiled blocks): the goals of issue 44, to measure against.
TARGET_MFU = {"GPT-2 124M": 0.30, "GPT-2 345M": 0.40, "LLaMA 1.1B": 0.40}
CPU_CONFIGS = {
    "small GPT-2": (dict(vocab_size=512, num_layers=2, hidden_size=128, num_attention_heads=4), 4, 128),
    "small LLaMA": (dict(vocab_size=512, num_layers=2, hidden_size=128, num_attention_heads=4, num_query_groups=2,
                         ffn_hidden_size=352, **LLAMA), 4, 128),
}


def transformers_model(cfg: GPTConfig):
    """The same shape in transformers (SDPA attention, no dropout)."""
    if cfg.activation == "swiglu":
        from transformers import LlamaConfig, LlamaForCausalLM

        return LlamaForCausalLM(LlamaConfig(
            vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_hidden_size,
            num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_attention_heads,
            num_key_value_heads=cfg.num_query_groups, max_position_embeddings=cfg.max_position_embeddings,
            rms_norm_eps=cfg.norm_epsilon, tie_word_embeddings=False, attn_implementation="sdpa"))
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.max_position_embeddings, n_embd=cfg.hidden_size,
        n_layer=cfg.num_layers, n_head=cfg.num_attention_heads, activation_function="gelu", resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, attn_implementation="sdpa"))


def kernel_kind(name: str) -> str:
    name = name.lower()
    if any(k in name for k in ("nccl", "all_reduce", "allreduce", "all_gather", "reduce_scatter")):
        return "collectives"
    if any(k in name for k in ("flash", "attention", "fmha", "sdpa")):
        return "attention"
    if any(k in name for k in ("gemm", "matmul", "mm", "cutlass", "sm90", "linear")):
        return "matrix products"
    return "the rest"


def breakdown(step, device: torch.device) -> dict[str, float]:
    """Share of the device time of a few steps by kind of kernel (CPU: of the operators' own time)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        for _ in range(3):
            step()
    totals: dict[str, float] = {}
    for event in prof.key_averages():
        spent = event.self_device_time_total if device.type == "cuda" else event.self_cpu_time_total
        if spent > 0 and not event.key.startswith("ProfilerStep"):
            totals[kernel_kind(event.key)] = totals.get(kernel_kind(event.key), 0.0) + spent
    whole = sum(totals.values()) or 1.0
    return {kind: spent / whole for kind, spent in sorted(totals.items())}


def measure(keywords: dict, batch: int, seq: int, warmup: int, steps: int, device: torch.device,
            compile_models: bool) -> dict:
    cfg = GPTConfig(max_position_embeddings=seq, **keywords)
    torch.manual_seed(0)
    ours, theirs = GPT(cfg).to(device), transformers_model(cfg).to(device)
    if compile_models:
        for block in ours.blocks.values():  # as `textmill train` compiles (parts.compile_blocks)
            block.compile()
        theirs = torch.compile(theirs)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), device=device)
    forward = {"textmill": lambda: ours(tokens[:, :-1], tokens[:, 1:]),
               "transformers": lambda: F.cross_entropy(theirs(input_ids=tokens[:, :-1]).logits.float().flatten(0, 1),
                                                       tokens[:, 1:].flatten())}
    models = {"textmill": ours, "transformers": theirs}
    optimizers = {name: make_optimizer(list(m.parameters()), 1e-4, 0.1, (0.9, 0.95), 1e-8) for name, m in models.items()}
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if device.type == "cuda" else contextlib.nullcontext

    def step(name: str) -> None:
        with autocast():
            loss = forward[name]()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(models[name].parameters(), 1.0)
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)

    times, peaks = {name: [] for name in models}, {}
    for n in range(warmup + steps):
        for name in models:
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            started = time.perf_counter()
            step(name)
            if device.type == "cuda":
                torch.cuda.synchronize()
                peaks[name] = max(peaks.get(name, 0), torch.cuda.max_memory_allocated())
            if n >= warmup:
                times[name].append(time.perf_counter() - started)
    result = {name: statistics.median(t) for name, t in times.items()}
    return {"seconds": result, "peak_bytes": peaks, "flops": training_flops(cfg, batch, seq),
            "params": sum(p.numel() for p in ours.parameters()), "tokens": batch * seq,
            "breakdown": breakdown(lambda: step("textmill"), device)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    configs = GPU_CONFIGS if parser.parse_known_args()[0].device.startswith("cuda") else CPU_CONFIGS
    parser.add_argument("--config", choices=sorted(configs), action="append", help="only these (default: all)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation happens there)")
    parser.add_argument("--steps", type=int, default=100, help="timed steps of each model")
    parser.add_argument("--compile", action="store_true", help="on a CPU, compile both models too (default on GPUs)")
    parser.add_argument("--quick", action="store_true", help="the first configuration alone, 20 steps after 3")
    args = parser.parse_args()
    if args.quick:
        args.config, args.steps, args.warmup = args.config or [next(iter(configs))], 20, 3
    device = torch.device(args.device)
    compile_models = device.type == "cuda" or args.compile
    peak = device_peak_tflops(device, None, torch.bfloat16)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    print(f"Run {date.today()} on {name}, torch {torch.__version__}, {'bf16 autocast' if device.type == 'cuda' else 'fp32'}, "
          f"{'compiled' if compile_models else 'eager'}; median of {args.steps} steps after {args.warmup}; "
          f"peak {peak or 'unknown'} TFLOP/s\n")
    print("| configuration | parameters | tokens/step | model | ms/step | tokens/s | MFU | peak memory GiB | "
          "vs transformers |\n|---|---:|---:|---|---:|---:|---:|---:|---:|")
    shares, verdicts = {}, []
    for label in args.config or configs:
        keywords, batch, seq = configs[label]
        r = measure(keywords, batch, seq, args.warmup, args.steps, device, compile_models)
        for model in ("textmill", "transformers"):
            s = r["seconds"][model]
            mfu = f"{r['flops'] / s / 1e12 / peak:.1%}" if peak else "-"
            memory = f"{r['peak_bytes'][model] / 2**30:.1f}" if r["peak_bytes"] else "-"
            print(f"| {label}, {batch} x {seq} | {r['params']:,} | {r['tokens']:,} | {model} | {1000 * s:.1f} | "
                  f"{r['tokens'] / s:,.0f} | {mfu} | {memory} | {r['seconds']['transformers'] / s:.2f}x |", flush=True)
        shares[label] = r["breakdown"]
        if peak and label in TARGET_MFU:
            seconds = r["seconds"]
            mfu, speed = r["flops"] / seconds["textmill"] / 1e12 / peak, seconds["transformers"] / seconds["textmill"]
            verdicts.append(f"- {label}: MFU {mfu:.1%} against the target {TARGET_MFU[label]:.0%}: "
                            f"{'met' if mfu >= TARGET_MFU[label] else 'NOT met'}; tokens/s {speed:.2f}x transformers': "
                            f"{'met' if speed >= 1 else 'NOT met'}")
    print("\ntextmill's step by kind of kernel (share of device time; on a CPU, of operator time):\n")
    kinds = sorted({k for b in shares.values() for k in b})
    print("| configuration | " + " | ".join(kinds) + " |\n|---|" + "---:|" * len(kinds))
    for label, b in shares.items():
        print(f"| {label} | " + " | ".join(f"{b.get(k, 0):.0%}" for k in kinds) + " |")
    if verdicts:
        print("\nTargets (bf16, compiled):\n\n" + "\n".join(verdicts))


if __name__ == "__main__":
    main()
