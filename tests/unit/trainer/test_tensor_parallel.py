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
