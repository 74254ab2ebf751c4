"""The fused language-model loss under 16-bit autocast: its gradient is as exact as autocast's own
F.linear + cross_entropy with a loss scale, measured against float64."""

import pytest
import torch

from textmill.trainer.model import language_model_loss


def relative_error(grad: torch.Tensor, reference: torch.Tensor) -> float:
    return ((grad.double() - reference).norm() / reference.norm()).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_hidden_states_gradient_under_autocast_is_as_exact_as_autocasts_own(dtype):
    g = torch.Generator().manual_seed(0)
    tokens, width, vocab = 2048, 64, 4096
    hidden = torch.randn(2, tokens // 2, width, generator=g)
    # Output embeddings that share a direction, as trained ones do: the gradient is a small difference of
    # large terms there, where precision lost early shows.
    weight = 0.02 * torch.randn(vocab, width, generator=g) + 0.5 * torch.randn(width, generator=g)
    labels = torch.randint(0, vocab, (2, tokens // 2), generator=g)

    exact = hidden.double().requires_grad_()
    torch.nn.functional.cross_entropy(exact.flatten(0, 1) @ weight.double().t(), labels.flatten()).backward()

    fused = hidden.clone().requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        language_model_loss(fused, weight, labels).backward()

    plain, scale = hidden.clone().requires_grad_(), 1024.0  # a loss scale, as fp16 training uses
    with torch.autocast("cpu", dtype=dtype):
        logits = torch.nn.functional.linear(plain.flatten(0, 1), weight)
        (scale * torch.nn.functional.cross_entropy(logits.float(), labels.flatten())).backward()

    ours, theirs = relative_error(fused.grad, exact.grad), relative_error(plain.grad / scale, exact.grad)
    assert ours <= 1.05 * theirs, (ours, theirs)  # fp16: 0.77% each; 35% before the division moved after the products


def test_an_evaluation_under_no_grad_makes_the_logits_product_alone():
    from torch.utils.flop_counter import FlopCounterMode

    tokens, width, vocab = 64, 16, 256
    hidden = torch.randn(1, tokens, width)
    weight = torch.nn.Parameter(torch.randn(vocab, width))  # requires a gradient, as a model's does
    labels = torch.randint(0, vocab, (1, tokens))
    logits_flops = 2 * tokens * width * vocab
    for grad_mode, products in ((torch.no_grad, 1), (torch.enable_grad, 3)):  # with gradients: d hidden, d weight
        with grad_mode(), FlopCounterMode(display=False) as counter:
            language_model_loss(hidden.clone().requires_grad_(), weight, labels)
        assert counter.get_total_flops() == products * logits_flops
