"""Building the model: one draw per parameter (from the seed and its name), whatever the device it is built on
and however it is cut, so every layout starts from the weights of one process; pipeline stages and what they pass."""

import torch

from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.model import GPT
from textmill.trainer.parallel.pipeline_parallel import split_stages

CONFIG = GPTConfig(vocab_size=96, hidden_size=32, num_layers=4, num_attention_heads=4, max_position_embeddings=16,
                   position_embedding="rope", normalization="rmsnorm", activation="swiglu", bias=False)


def test_a_meta_built_model_materializes_the_weights_of_a_directly_built_one():
    whole = GPT(CONFIG, seed=3)
    with torch.device("meta"):
        model = GPT(CONFIG)
    assert all(p.is_meta for p in model.parameters())
    model.materialize(torch.device("cpu"), seed=3)
    expected = whole.state_dict()
    assert all(torch.equal(value, expected[name]) for name, value in model.state_dict().items())
    # The non-persistent RoPE tables are made again too.
    assert torch.equal(model.rope_cos, whole.rope_cos) and torch.equal(model.rope_sin, whole.rope_sin)


def test_pipeline_stages_hold_their_part_of_the_one_model():
    whole = dict(GPT(CONFIG, seed=5).named_parameters())
    with torch.device("meta"):
        model = GPT(CONFIG)
    names = set()
    for _, stage in split_stages(model, 1, 2, 1):  # the second of two stages: layers 2 and 3, the final norm
        stage.materialize(torch.device("cpu"), seed=5)
        for name, p in stage.named_parameters():
            assert torch.equal(p, whole[name]), name
            names.add(name)
    assert "blocks.2.attn.qkv.weight" in names and "blocks.0.attn.qkv.weight" not in names


def test_the_seed_and_the_name_pick_the_values():
    a, b, c = (dict(GPT(CONFIG, seed=s).named_parameters()) for s in (1, 1, 2))
    assert torch.equal(a["blocks.0.mlp.fc1.weight"], b["blocks.0.mlp.fc1.weight"])
    assert not torch.equal(a["blocks.0.mlp.fc1.weight"], c["blocks.0.mlp.fc1.weight"])
    assert not torch.equal(a["blocks.0.mlp.fc1.weight"], a["blocks.1.mlp.fc1.weight"])
    # Megatron's init: unit norms, N(0, 0.02) and the residual projections scaled by 1/sqrt(2 x layers).
    assert torch.equal(a["blocks.0.norm1.weight"], torch.ones(32))
    assert abs(a["wte.weight"].std().item() - 0.02) < 0.002
    assert abs(a["blocks.0.attn.proj.weight"].std().item() - 0.02 / (2 * 4) ** 0.5) < 0.001


def test_pipeline_stages_pass_hidden_states_in_the_compute_dtype():
    """Under bf16 autocast a stage hands the next one bf16 hidden states (half the bytes), and the next stage
    carries the residual stream on in fp32: the stages compute what the whole model does, to bf16 rounding."""
    whole = GPT(CONFIG, seed=5)
    with torch.device("meta"):
        model = GPT(CONFIG)
    stages = [stage for s in (0, 1) for _, stage in split_stages(model, s, 2, 1, torch.bfloat16)]
    for stage in stages:
        stage.materialize(torch.device("cpu"), seed=5)
    tokens = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(6))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = stages[0](tokens[:, :-1])
        loss = stages[1](hidden, tokens[:, 1:])
        expected = whole(tokens[:, :-1], tokens[:, 1:])
    assert hidden.dtype == torch.bfloat16
    assert abs(loss.item() - expected.item()) < 1e-2 * expected.item()
