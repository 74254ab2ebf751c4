"""Grouped-query attention and GPT-J blocks in the model: the KV cache holds the query groups, and Megatron's
flags give the fields."""

import pytest
import torch

from textmill.cli import build_parser
from textmill.errors import TextmillError
from textmill.settings import from_namespace
from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.model import GPT, KVCache
from textmill.trainer.train_config import TrainConfig, model_config


def test_the_kv_cache_holds_the_query_groups_and_gives_the_full_pass(tmp_path):
    torch.manual_seed(1)
    config = GPTConfig(vocab_size=128, num_layers=2, hidden_size=64, num_attention_heads=8, num_query_groups=2,
                       max_position_embeddings=64, position_embedding="rope", normalization="rmsnorm",
                       activation="swiglu", bias=False, tie_embeddings=False, rope_scaling="llama3",
                       rope_original_max_positions=16)
    model = GPT(config).eval()
    tokens = torch.randint(0, 128, (3, 20), generator=torch.Generator().manual_seed(3))
    cache = KVCache(64)
    with torch.no_grad():
        full = model(tokens)
        steps = [model(tokens[:, :12], cache=cache)[:, -1]] + [model(tokens[:, t : t + 1], cache=cache)[:, -1]
                                                                  for t in range(12, 20)]
    assert torch.allclose(torch.stack(steps[1:], 1), full[:, 12:], atol=1e-5)
    assert torch.allclose(steps[0], full[:, 11], atol=1e-5)
    assert cache.layers["0"][0].shape == (3, 2, 64, 8)  # two key heads, not eight


def train_flags(*argv: str) -> TrainConfig:
    return from_namespace(TrainConfig, build_parser().parse_args(["train", *argv]))


def test_megatron_flags_for_grouped_query_attention_and_rope_scaling():
    config = train_flags(*["--data-path", "x", "--vocab-size", "100", "--train-iters", "1", "--num-layers", "2",
                                    "--hidden-size", "64", "--num-attention-heads", "8", "--group-query-attention",
                                    "--num-query-groups", "2", "--use-rope-scaling", "--rope-scaling-factor", "4",
                                    "--position-embedding-type", "rope"])
    model = model_config(config, 100)
    assert (model.num_query_groups, model.kv_heads, model.rope_scaling, model.rope_scaling_factor) == (2, 2, "llama3", 4.0)
    plain = model_config(train_flags("--data-path", "x", "--vocab-size", "100", "--train-iters", "1",
                                     "--num-query-groups", "2"), 100)
    assert plain.num_query_groups is None  # the group count means nothing without --group-query-attention
    with pytest.raises(TextmillError, match="num_query_groups 3 must divide the 8 attention heads"):
        GPTConfig(vocab_size=128, num_attention_heads=8, hidden_size=64, num_query_groups=3)


def test_megatron_style_flags_for_gptj_blocks():
    base = ["--data-path", "x", "--vocab-size", "100", "--train-iters", "1", "--position-embedding-type", "rope"]
    config = train_flags(*base, "--rotary-percent", "0.25", "--rotary-interleaved", "--use-parallel-residual",
                         "--shared-input-norm", "--disable-attention-bias", "--output-layer-bias",
                         "--untie-embeddings-and-output-weights", "--openai-gelu")
    model = model_config(config, 100)
    assert (model.rotary_interleaved, model.shared_input_norm, model.attention_bias, model.bias, model.output_bias) == (
        True, True, False, True, True)
    gpt = GPT(model)
    assert gpt.lm_head.bias is not None and gpt.blocks["0"].mlp.fc1.bias is not None and gpt.blocks["0"].attn.proj.bias is None
    with pytest.raises(TextmillError, match="a shared input norm needs the parallel residual"):
        model_config(train_flags(*base, "--shared-input-norm"), 100)
    with pytest.raises(TextmillError, match="an output layer bias needs an untied output layer"):
        model_config(train_flags(*base, "--output-layer-bias"), 100)


def test_megatron_style_flags_for_qwen2_blocks():
    """--add-qkv-bias: a bias on the QKV projection alone, the other linear layers without (Qwen2's block)."""
    config = train_flags("--data-path", "x", "--vocab-size", "100", "--train-iters", "1", "--position-embedding-type",
                         "rope", "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear", "--add-qkv-bias")
    gpt = GPT(model_config(config, 100))
    attention = gpt.blocks["0"].attn
    assert attention.qkv.bias is not None and attention.proj.bias is None and gpt.blocks["0"].mlp.fc1.bias is None
