"""The pieces of tensor parallelism that run in one process (a group of one: the `mesh` fixture)."""

import torch

from textmill.trainer.parallel.tensor_parallel import SumGradient


def test_the_gradient_sum_over_a_replicated_weights_local_view_compiles(mesh):
    """GroupReplicatedQKV's use of SumGradient: under torch.compile the local view of a replicated DTensor
    went in, and returning it as-is was refused ("a view ... modified inplace")."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    weight = torch.nn.Parameter(distribute_tensor(torch.randn(6, 4, generator=torch.Generator().manual_seed(0)),
                                                  mesh, [Replicate()]))
    rows, group = torch.tensor([0, 2, 4]), mesh.get_group()

    def loss(x):
        local = SumGradient.apply(weight.to_local(), group)[rows]
        return torch.nn.functional.linear(SumGradient.apply(x, group), local).square().sum()

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
    loss(x).backward()
    eager = weight.grad.to_local().clone(), x.grad.clone()
    weight.grad, x.grad = None, None
    torch.compile(loss)(x).backward()
    assert torch.allclose(weight.grad.to_local(), eager[0], atol=1e-6) and torch.allclose(x.grad, eager[1], atol=1e-6)


def test_sublayer_inputs_cross_the_group_in_the_compute_dtype(mesh):
    """Under bf16 autocast the norms return fp32; the attention and MLP inputs are cast to bf16 before
    sequence parallelism gathers them (half the bytes), and the model computes what it computed unsplit."""
    import copy

    from textmill.trainer.gpt_config import GPTConfig
    from textmill.trainer.model import GPT
    from textmill.trainer.parallel.tensor_parallel import apply_tensor_parallel

    config = GPTConfig(vocab_size=64, hidden_size=32, num_layers=2, num_attention_heads=4, max_position_embeddings=16)
    whole = GPT(config, seed=1)
    split = copy.deepcopy(whole)
    apply_tensor_parallel(split, mesh, sequence_parallel=True)
    gathered = []
    for block in split.blocks.values():
        for sublayer in (block.attn, block.mlp):  # runs after the plan's hooks: sees what was gathered
            sublayer.register_forward_pre_hook(lambda module, args: gathered.append(args[0].dtype))
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = split(tokens[:, :-1], tokens[:, 1:])
        expected = whole(tokens[:, :-1], tokens[:, 1:])
    assert gathered == [torch.bfloat16] * 4
    assert torch.allclose(loss, expected, rtol=1e-6)
