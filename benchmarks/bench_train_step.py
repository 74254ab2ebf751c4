"""Training-step throughput: textmill's GPT against transformers' GPT2LMHeadModel, same model, same step; or,
with --against compile, textmill's GPT with its blocks compiled (`textmill train --compile`) against eager.

    python benchmarks/bench_train_step.py [--config NAME ...] [--dtype fp32|bf16] [--device cpu|cuda]
                                          [--against transformers|compile]

Both models get the same configuration (GPT-2 blocks, exact GELU, dropout 0.1, tied embeddings; the
GPT-2 vocabulary padded to 50304, or a small one), the same batch of tokens, the same optimizer (textmill's: AdamW with
Megatron's parameter groups) and the same dtype; a step is forward, loss, backward, gradient clipping and
the optimizer step. The two models alternate step by step so drift on a shared machine hits both alike;
the table reports the median step. Model FLOPs follow `textmill.trainer.model.training_flops`. With
--against compile the compiled model's first step (compilation included) is reported apart, less its
median step, as the compile time.
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

from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.model import GPT, training_flops
from textmill.trainer.optim import make_optimizer


def textmill_step(model, tokens):
    return model(tokens[:, :-1], tokens[:, 1:])


def hf_step(model, tokens):
    # Hugging Face shifts labels inside; give it the same seq-long input and the same targets.
    logits = model(input_ids=tokens[:, :-1]).logits
    return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())


# name: (layers, hidden, heads, vocab, batch, seq, timed steps)
CONFIGS = {
    "small, GPT-2 vocabulary": (4, 256, 4, 50304, 8, 256, 10),
    "GPT-2 124M": (12, 768, 12, 50304, 4, 128, 6),
    "small, 512-token vocabulary": (4, 256, 4, 512, 8, 256, 20),
}


def compared_models(cfg: GPTConfig, against: str, device: torch.device) -> dict:
    """The two models of a comparison, each with its step function."""
    if against == "compile":
        from textmill.trainer.parts import compile_blocks

        compiled = GPT(cfg)
        compile_blocks(compiled, device, print)
        return {"textmill": (GPT(cfg), textmill_step), "compiled": (compiled, textmill_step)}
    from transformers import GPT2Config, GPT2LMHeadModel

    hf_cfg = GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.max_position_embeddings, n_embd=cfg.hidden_size,
                        n_layer=cfg.num_layers, n_head=cfg.num_attention_heads, activation_function="gelu",
                        resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, bos_token_id=0, eos_token_id=0,
                        attn_implementation="sdpa")
    return {"textmill": (GPT(cfg), textmill_step), "transformers": (GPT2LMHeadModel(hf_cfg), hf_step)}


def measure(layers, hidden, heads, vocab, batch, seq, steps, dtype, device, against="transformers") -> dict:
    """Median seconds per step of each model, the two alternating step by step; and each one's first step."""
    cfg = GPTConfig(vocab_size=vocab, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                    max_position_embeddings=seq, hidden_dropout=0.1, attention_dropout=0.1)
    torch.manual_seed(0)
    models = compared_models(cfg, against, device)
    tokens = torch.randint(0, min(vocab, 50257), (batch, seq + 1), device=device)
    optimizers, times, first = {}, {name: [] for name in models}, {}
    for name, (model, _) in models.items():
        model.to(device).train()
        optimizers[name] = make_optimizer(list(model.parameters()), 1e-4, 0.01, (0.9, 0.95), 1e-8)
    for step in range(steps + 2):
        for name, (model, forward) in models.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext():
                loss = forward(model, tokens)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if step >= 2:  # two warm-up steps
                times[name].append(time.perf_counter() - started)
            elif step == 0:
                first[name] = time.perf_counter() - started
    return {name: statistics.median(t) for name, t in times.items()} | {
        "first": first, "params": sum(p.numel() for p in models["textmill"][0].parameters()),
        "flops": training_flops(cfg, batch, seq)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=sorted(CONFIGS), action="append",
                        help="run only these configurations (default: all)")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="bf16 = autocast")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--against", choices=["transformers", "compile"], default="transformers",
                        help="the baseline: transformers' GPT2LMHeadModel, or textmill's own blocks compiled")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"Run {date.today()} on {platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"{device}, {args.dtype}; median step after 2 warm-up steps\n")
    if args.against == "compile":
        print("| configuration | parameters | tokens/step | eager ms/step | compiled ms/step | eager tokens/s | "
              "compiled tokens/s | compiled vs eager | compile time s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    else:
        print("| configuration | parameters | tokens/step | textmill ms/step | transformers ms/step | textmill tokens/s | "
              "textmill model TFLOP/s | textmill vs transformers |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.config or CONFIGS:
        layers, hidden, heads, vocab, batch, seq, steps = CONFIGS[name]
        r = measure(layers, hidden, heads, vocab, batch, seq, steps, args.dtype, device, args.against)
        label = f"{name}: {layers} layers, h {hidden}, vocab {vocab}, {batch} x {seq}"
        tokens = batch * seq
        if args.against == "compile":
            print(f"| {label} | {r['params']:,} | {tokens} | {1000 * r['textmill']:.0f} | {1000 * r['compiled']:.0f} | "
                  f"{tokens / r['textmill']:,.0f} | {tokens / r['compiled']:,.0f} | {r['textmill'] / r['compiled']:.2f}x | "
                  f"{r['first']['compiled'] - r['compiled']:.1f} |", flush=True)
            continue
        print(f"| {label} | {r['params']:,} | {tokens} | {1000 * r['textmill']:.0f} | {1000 * r['transformers']:.0f} | "
              f"{tokens / r['textmill']:,.0f} | {r['flops'] / r['textmill'] / 1e12:.3f} | "
              f"{r['transformers'] / r['textmill']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
