"""GPT-2 124M's memory on a GPU against the activation estimate docs/training.md prints for the README's command
(tests/unit/test_docs.py checks that the page prints what activation_bytes computes)."""

import torch

from support.gpu import needs_cuda
from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.model import GPT, activation_bytes
from textmill.trainer.optim import make_optimizer
from textmill.trainer.parts import compile_blocks

MICRO_BATCH, SEQ = 32, 1024  # the README's GPT-2 124M command: --micro-batch-size 32 --seq-length 1024 --bf16


def test_a_124m_step_keeps_the_estimated_activations(device):
    """What the forward pass of the README's step keeps on the GPU (bf16, compiled blocks, dropout 0.1), measured
    after a warm-up step, within 20% of activation_bytes."""
    needs_cuda(device, "a GPU step's peak memory")
    config = GPTConfig(vocab_size=50304, num_layers=12, hidden_size=768, num_attention_heads=12, max_position_embeddings=SEQ,
                       hidden_dropout=0.1, attention_dropout=0.1)
    model = GPT(config).to(device)
    compile_blocks(model, device, print)
    optimizer = make_optimizer(list(model.parameters()), 6e-4, 0.1, (0.9, 0.95), 1e-8)
    tokens = torch.randint(0, 50257, (MICRO_BATCH, SEQ + 1), device=device)
    kept = []
    for _ in range(2):  # the first step compiles; the second is measured
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens[:, :-1], tokens[:, 1:])
        torch.cuda.synchronize()
        kept.append(torch.cuda.memory_allocated() - before)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        peak = torch.cuda.max_memory_allocated() - before
    estimate = activation_bytes(config, MICRO_BATCH, SEQ)
    print(f"GPT-2 124M, {MICRO_BATCH} x {SEQ}, bf16, compiled: forward keeps {kept[1] / 1e9:.2f} GB, step peak "
          f"{peak / 1e9:.2f} GB above the weights and optimizer, estimate {estimate / 1e9:.2f} GB")
    assert abs(kept[1] - estimate) <= 0.2 * estimate, (kept[1], estimate)
