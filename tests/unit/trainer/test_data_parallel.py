"""Data parallelism's wrapping, in one process (a group of one: the `mesh` fixture)."""

import torch

from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.model import GPT
from textmill.trainer.parallel.data_parallel import apply_data_parallel


def test_fsdp2_under_bf16_gathers_parameters_in_bf16_and_keeps_fp32_shards(mesh):
    model = GPT(GPTConfig(vocab_size=256, num_layers=2, hidden_size=32, num_attention_heads=4))
    model = apply_data_parallel(model, mesh, sharded=True, compute_dtype=torch.bfloat16)
    seen = []
    block = next(iter(model.blocks.values()))
    block.register_forward_hook(lambda module, args, out: seen.append(module.mlp.fc1.weight.dtype))
    tokens = torch.randint(0, 256, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(tokens, tokens).backward()
    assert seen == [torch.bfloat16]  # gathered for the products in the compute dtype
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the shards the optimizer updates
    assert {p.grad.dtype for p in model.parameters()} == {torch.float32}
