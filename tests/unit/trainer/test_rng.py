"""Dropout's random streams per rank (parallel/rng.py): masks differ where ranks hold different parts and
agree where they hold the same, and a recomputed block replays the masks of its forward pass."""

import torch

from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.model import GPT
from textmill.trainer.parallel.rng import DropoutStreams, use_dropout_streams

CPU = torch.device("cpu")


def draws(tp_rank: int, pp_rank: int, pipeline: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(a draw from the tensor-parallel stream, then one from the default stream) of a rank that built its
    model from seed 7, as every rank does."""
    torch.manual_seed(7)
    streams = DropoutStreams(CPU, 7, tp_rank, pp_rank, pipeline)
    with streams.tensor_parallel():
        own = torch.rand(8)
    return own, torch.rand(8)


def test_tensor_parallel_ranks_draw_their_own_masks_and_share_the_default_stream():
    (own0, shared0), (own1, shared1) = draws(0, 0, False), draws(1, 0, False)
    assert not torch.equal(own0, own1)  # different heads, different masks
    assert torch.equal(shared0, shared1)  # the same whole activation, the same mask
    torch.manual_seed(7)
    assert torch.equal(shared0, torch.rand(8))  # the tensor-parallel draw left the default stream alone
    # Pipeline stages hold different layers: their default streams differ too.
    assert not torch.equal(draws(0, 0, True)[1], draws(0, 1, True)[1])


def test_a_recomputed_block_replays_the_masks_of_its_forward_pass():
    config = GPTConfig(vocab_size=64, num_layers=2, hidden_size=32, num_attention_heads=4, max_position_embeddings=16,
                       attention_dropout=0.5, hidden_dropout=0.5)
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    grads = {}
    for granularity in (None, "full", "selective"):
        torch.manual_seed(1)
        model = GPT(config)
        model.set_recompute(granularity)
        streams = DropoutStreams(CPU, 1, tp_rank=1, pp_rank=0, pipeline=False)
        use_dropout_streams(model, streams, sequence_parallel=True)
        model(tokens, tokens).backward()
        grads[granularity] = [p.grad.clone() for p in model.parameters()]
    for granularity in ("full", "selective"):
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads[None], grads[granularity], strict=True)), granularity
