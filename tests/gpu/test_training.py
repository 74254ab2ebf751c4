"""The trainer's numerics on a GPU: 16-bit autocast and compiled blocks against fp32 eager, loss scaling, the fused
optimizer, offloaded and recomputed activations, checkpoints between the GPU and the CPU."""

import pytest
import torch

from support.gpu import needs_cuda
from support.training import LLAMA, train_config
from textmill.trainer.optim import make_optimizer, parameter_groups
from textmill.trainer.train import Trainer

NO_DROPOUT = dict(hidden_dropout=0.0, attention_dropout=0.0)
TINY_LLAMA = dict(LLAMA, group_query_attention=True, num_query_groups=2)  # 4 heads share 2 key/value groups
# Where activations outweigh the weights, so what a forward pass keeps on the device shows.
WIDE = dict(micro_batch_size=16, global_batch_size=16, seq_length=256, num_layers=4, hidden_size=256, num_attention_heads=4,
            bf16=True, train_iters=1)


def losses(trainer: Trainer) -> list[float]:
    return [r["lm_loss"] for r in trainer.train()["log"] if "lm_loss" in r]


def run(corpus, device, **settings) -> Trainer:
    return Trainer(train_config(corpus, device=device.type, eval_interval=100, **NO_DROPOUT, **settings))


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_bf16_with_compiled_blocks_follows_fp32_eager(corpus, device, family):
    """Tolerance: 0.5% of the loss at each of 6 steps. bf16 keeps 8 significant bits (2^-9 = 0.2% relative rounding
    of each product's inputs, sums in fp32); near its start a model's logits are small and the loss is about
    ln(vocabulary), so rounding moves a loss far less than 0.2% (on a CPU, where autocast rounds the same
    products, the two curves differ by at most 1.5e-5). The steps' updates differ by about the rounding of their
    gradients, a fraction of the 10% the loss falls in 6 steps. A wrong attention mask, a missing or doubled
    cast, or a compiled graph that differs from eager moves the curve by about as much as a step does (over 1%)."""
    shape = TINY_LLAMA if family == "llama" else {}
    reference = losses(run(corpus, device, train_iters=6, no_compile=True, no_tf32=True, **shape))
    fast = losses(run(corpus, device, train_iters=6, bf16=True, compile=True, **shape))
    gaps = [abs(a - b) / a for a, b in zip(reference, fast, strict=True)]
    assert len(gaps) == 6 and max(gaps) < 5e-3, (reference, fast)
    assert fast[-1] < fast[0], fast  # it trains


def first_gradients(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The gradients of the first micro-batch as the trainer's step makes them (autocast, scaled loss), unscaled."""
    tokens, labels = next(trainer.micro_batches(trainer.train_data, 0, trainer.config.global_batch_size))
    with trainer.autocast():
        loss = trainer.parts.models[0](tokens, labels)
    trainer.scaler.scale(loss).backward()
    trainer.scaler.unscale_(trainer.parts.optimizers[0])
    return {name: p.grad.double() for name, p in trainer.parts.models[0].named_parameters()}


def test_fp16_with_loss_scaling_gives_the_fp32_gradients(corpus, device):
    """fp16 keeps 11 significant bits: with the loss scaled (2^12 here, no overflow) the gradients of a step come
    within 1e-2 of fp32's, relative to the whole gradient's norm. The fp32 reference has TF32 off."""
    reference = first_gradients(run(corpus, device, train_iters=1, no_compile=True, no_tf32=True))
    scaled = run(corpus, device, train_iters=1, no_compile=True, fp16=True, initial_loss_scale=2.0**12)
    half = first_gradients(scaled)
    assert scaled.scaler.get_scale() == 2.0**12 and all(torch.isfinite(g).all() for g in half.values())
    error = torch.cat([(half[n] - reference[n]).flatten() for n in reference]).norm()
    norm = torch.cat([g.flatten() for g in reference.values()]).norm()
    assert error / norm < 1e-2, float(error / norm)


def test_the_fused_adamw_steps_as_the_unfused_one(device):
    needs_cuda(device, "torch's fused AdamW kernel")
    torch.manual_seed(0)
    shapes = [(512, 128), (128,), (384, 128), (128, 128)]
    fused_params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
    plain_params = [torch.nn.Parameter(p.detach().clone()) for p in fused_params]
    fused = make_optimizer(fused_params, 3e-3, 0.1, (0.9, 0.95), 1e-8)
    assert fused.defaults["fused"], "make_optimizer did not take the fused kernel on a GPU"
    plain = torch.optim.AdamW(parameter_groups(plain_params, 0.1), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    for _ in range(10):
        grads = [torch.randn(s, device=device) for s in shapes]
        for params, optimizer in ((fused_params, fused), (plain_params, plain)):
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            optimizer.step()
    for a, b in zip(fused_params, plain_params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def saved_bytes(trainer: Trainer) -> int:
    """Device bytes a forward pass of the first micro-batch keeps for its backward pass, under the trainer's
    own autocast and offload contexts."""
    tokens, labels = next(trainer.micro_batches(trainer.train_data, 0, trainer.config.global_batch_size))
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with trainer.autocast(), trainer.offload():
        loss = trainer.parts.models[0](tokens, labels)
        torch.cuda.synchronize()
        kept = torch.cuda.memory_allocated() - before
        loss.backward()
    trainer.parts.optimizers[0].zero_grad(set_to_none=True)
    return kept


@pytest.mark.parametrize("recompute", [None, "full"])
def test_offloaded_activations_on_their_stream_give_the_same_losses(corpus, device, recompute):
    """The copies to host run on a stream of their own (trainer/offload.py); the losses must be those of the run
    without offloading (to the last bits a GPU's atomics may move), and on a GPU the activations must leave it."""
    settings = dict(train_iters=4, bf16=device.type == "cuda", recompute_granularity=recompute)
    plain = losses(run(corpus, device, **settings))
    offloaded = losses(run(corpus, device, cpu_offload_activations=True, **settings))
    assert offloaded == pytest.approx(plain, rel=1e-5) and len(plain) == 4
    if device.type == "cuda" and recompute is None:
        on_device, on_host = (saved_bytes(run(corpus, device, cpu_offload_activations=o, **WIDE)) for o in (False, True))
        assert on_host < on_device / 2, (on_device, on_host)


def test_recomputed_activations_give_the_same_losses_in_less_memory(corpus, device):
    settings = dict(train_iters=4, bf16=device.type == "cuda")
    plain = losses(run(corpus, device, **settings))
    for granularity in ("full", "selective"):
        assert losses(run(corpus, device, recompute_granularity=granularity, **settings)) == pytest.approx(plain, rel=1e-5)
    if device.type == "cuda":
        kept = [saved_bytes(run(corpus, device, recompute_granularity=g, **WIDE)) for g in (None, "full")]
        assert kept[1] < kept[0] / 2, kept


def test_a_checkpoint_saved_on_the_gpu_loads_on_the_cpu_and_back_unchanged(corpus, device, tmp_path):
    on_gpu = run(corpus, device, train_iters=3, save=tmp_path / "gpu")
    on_gpu.train()
    on_cpu = run(corpus, torch.device("cpu"), train_iters=3, load=tmp_path / "gpu", save=tmp_path / "cpu")
    assert on_cpu.state.iteration == 3
    on_cpu.save()
    back = run(corpus, device, train_iters=3, load=tmp_path / "cpu")
    weights = [t.parts.models[0].state_dict() for t in (on_gpu, on_cpu, back)]
    for name, saved in weights[0].items():
        assert torch.equal(saved.cpu(), weights[1][name]) and torch.equal(saved, weights[2][name]), name
    moments = [t.parts.optimizers[0].state_dict()["state"] for t in (on_gpu, back)]
    for index, state in moments[0].items():
        for key, value in state.items():
            assert torch.equal(value.cpu(), moments[1][index][key].cpu()), (index, key)
