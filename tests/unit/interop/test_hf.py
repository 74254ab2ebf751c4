"""Hugging Face folders in and out, against transformers' own models: GPT-2, LLaMA with grouped-query and
multi-query attention and LLaMA 3.1's rope scaling, GPT-NeoX and GPT-J keep their function on import (logits to
1e-4) and come back tensor for tensor on export. (`textmill import hf` / `export hf` themselves run in
tests/integration/test_families.py and test_evaluate.py.)"""

import json
import shutil

import pytest
import torch

from support.files import TEST_DATA
from support.hf_models import TEXTS, llama_style_tokenizer, write_hf_gptj, write_hf_llama
from textmill.interop.hf import export_hf, import_hf
from textmill.trainer.checkpoint import load_model
from textmill.trainer.model import KVCache

transformers = pytest.importorskip("transformers")


def write_hf_gpt2(folder, **config):
    """A randomly initialised Hugging Face GPT-2 with the real GPT-2 vocabulary, saved as users get it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, **config)).eval()
    model.save_pretrained(folder)
    shutil.copyfile(TEST_DATA / "gpt2-vocab.json", folder / "vocab.json")
    shutil.copyfile(TEST_DATA / "gpt2-merges.txt", folder / "merges.txt")
    return model


@pytest.mark.parametrize("config", [{}, {"activation_function": "gelu", "tie_word_embeddings": False}])
def test_import_hf_gpt2_keeps_its_function_and_round_trips(tmp_path, config):
    from safetensors.torch import load_file

    hf_model = write_hf_gpt2(tmp_path / "hf", **config)
    imported = import_hf(tmp_path / "hf", tmp_path / "ckpt")
    assert (imported["vocab_size"], imported["padded_vocab_size"]) == (50257, 50304)
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "release"
    ours, ckpt = load_model(tmp_path / "ckpt")
    tokens = torch.randint(0, 50257, (2, 100), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (hf_model(tokens).logits - ours(tokens)[..., :50257]).abs().max().item() < 1e-4
    assert ckpt.meta["vocab_size"] == 50257 and ckpt.meta["iteration"] == 0 and ckpt.release

    export_hf(tmp_path / "ckpt", tmp_path / "back")
    original, back = load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(back) == sorted(k for k in original if not k.endswith(".attn.bias"))
    assert all(torch.equal(original[k], back[k]) for k in back)


@pytest.mark.parametrize("kv_heads", [2, 1], ids=["grouped-query", "multi-query"])
def test_import_hf_llama_with_grouped_query_attention_keeps_its_function_and_round_trips(tmp_path, kv_heads):
    from safetensors.torch import load_file

    hf_model, tokenizer = write_hf_llama(tmp_path / "hf", kv_heads)
    import_hf(tmp_path / "hf", tmp_path / "ckpt")
    ours, ckpt = load_model(tmp_path / "ckpt")
    assert ours.config.kv_heads == kv_heads and ours.config.rope_scaling == "llama3"
    assert ours.blocks["0"].attn.qkv.weight.shape == ((4 + 2 * kv_heads) * 16, 64)
    vocab = len(tokenizer)
    tokens = torch.randint(0, vocab, (2, 100), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (hf_model(tokens).logits - ours(tokens)[..., :vocab]).abs().max().item() < 1e-4
    assert (tmp_path / "ckpt" / "tokenizer" / "tokenizer.json").is_file()  # the model's own tokenizer came along

    export_hf(tmp_path / "ckpt", tmp_path / "back")
    original, back = load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(back) == sorted(original) and all(torch.equal(original[k], back[k]) for k in back)
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["num_key_value_heads"] == kv_heads and config["rope_parameters"]["rope_type"] == "llama3"
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    exported_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "back")
    assert exported_tokenizer(TEXTS[0]).input_ids == tokenizer(TEXTS[0]).input_ids
    with torch.no_grad():
        assert (again(tokens).logits - hf_model(tokens).logits).abs().max().item() < 1e-5


SMALL_LLAMA = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                   intermediate_size=128, max_position_embeddings=128)
# One row a family: transformers' config class and a small shape of it. GPT-2, LLaMA and GPT-J have tests of
# their own below as well (the real GPT-2 vocabulary, query groups and rope scaling, padded embedding rows).
FAMILY_ROWS = {
    "gpt2": ("GPT2Config", dict(n_layer=2, n_embd=64, n_head=4, n_positions=128)),
    "llama": ("LlamaConfig", SMALL_LLAMA),
    "mistral": ("MistralConfig", dict(SMALL_LLAMA, sliding_window=None)),
    "qwen2": ("Qwen2Config", dict(SMALL_LLAMA, tie_word_embeddings=True)),
    "gpt_neox-parallel-residual": ("GPTNeoXConfig", dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                                         intermediate_size=256, max_position_embeddings=128,
                                                         rotary_pct=0.25, use_parallel_residual=True)),
    "gpt_neox-sequential": ("GPTNeoXConfig", dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                                  intermediate_size=256, max_position_embeddings=128, rotary_pct=0.25,
                                                  use_parallel_residual=False)),
    "gptj": ("GPTJConfig", dict(n_embd=64, n_head=4, n_layer=2, n_positions=128, rotary_dim=4)),
}


def write_hf_model(folder, config_class: str, **config):
    """A randomly initialised transformers model with a small tokenizer of its own; biases and norms drawn too
    (transformers starts them at 0 and 1, which would leave a bias's conversion untested)."""
    tokenizer = llama_style_tokenizer(folder, TEXTS)
    torch.manual_seed(0)
    hf_config = getattr(transformers, config_class)(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                                                    eos_token_id=tokenizer.eos_token_id, **config)
    hf_model = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    with torch.no_grad():
        for p in hf_model.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    hf_model.save_pretrained(folder)
    return hf_model, len(tokenizer)


@pytest.mark.parametrize("row", FAMILY_ROWS)
def test_each_family_imports_with_transformers_logits_and_exports_tensor_for_tensor(tmp_path, row):
    from safetensors.torch import load_file

    config_class, config = FAMILY_ROWS[row]
    hf_model, vocab = write_hf_model(tmp_path / "hf", config_class, **config)
    family = hf_model.config.model_type
    assert import_hf(tmp_path / "hf", tmp_path / "ckpt")["family"] == family
    ours, _ = load_model(tmp_path / "ckpt")
    tokens = torch.randint(0, vocab, (2, 100), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (hf_model(tokens).logits - ours(tokens)[..., :vocab]).abs().max().item() < 1e-4

    assert export_hf(tmp_path / "ckpt", tmp_path / "back")["family"] == family
    original, back = load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(back) == sorted(k for k in original if not k.endswith(".attn.bias"))
    assert all(torch.equal(original[k], back[k]) for k in back)
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    assert type(again) is type(hf_model)
    with torch.no_grad():
        assert (again(tokens).logits - hf_model(tokens).logits).abs().max().item() < 1e-5


@pytest.mark.parametrize("config_class, config, refused", [
    ("MistralConfig", dict(SMALL_LLAMA, sliding_window=32), "sliding-window attention (32 of 128 positions)"),
    ("Qwen2Config", dict(SMALL_LLAMA, use_sliding_window=True, sliding_window=32), "sliding-window attention"),
])
def test_a_sliding_window_shorter_than_the_context_is_refused_in_one_line(tmp_path, config_class, config, refused):
    from textmill.errors import TextmillError

    write_hf_model(tmp_path / "hf", config_class, **config)
    with pytest.raises(TextmillError) as error:
        import_hf(tmp_path / "hf", tmp_path / "ckpt")
    assert str(error.value).endswith(f"model uses what textmill's blocks do not have: {refused}")
    assert not (tmp_path / "ckpt").exists()


def test_a_trained_model_with_a_qkv_bias_exports_as_qwen2(tmp_path):
    """Shape decides the family where no import recorded one: LLaMA's block with a bias on QKV only is Qwen2's."""
    from textmill.interop.families import hf_family
    from textmill.trainer.gpt_config import GPTConfig

    llama = dict(vocab_size=128, position_embedding="rope", normalization="rmsnorm", activation="swiglu", bias=False)
    assert hf_family(GPTConfig(**llama)).model_type == "llama"
    assert hf_family(GPTConfig(**llama, qkv_bias=True)).model_type == "qwen2"
    assert hf_family(GPTConfig(**llama, family="mistral")).model_type == "mistral"
    assert hf_family(GPTConfig(**llama, qkv_bias=True, family="mistral")).model_type == "qwen2"  # no longer Mistral's shape


def test_import_hf_gptj_keeps_its_function_and_round_trips(tmp_path):
    """GPT-J's blocks: rotary embeddings on neighbouring pairs of a quarter of each head, one LayerNorm read
    by attention and MLP alike, no attention biases, an untied output layer with a bias."""
    from safetensors.torch import load_file

    hf_model = write_hf_gptj(tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "ckpt")
    ours, ckpt = load_model(tmp_path / "ckpt")
    c = ours.config
    assert (c.rotary_dim, c.rotary_interleaved, c.shared_input_norm, c.attention_bias, c.output_bias) == (
        4, True, True, False, True)
    assert (ckpt.meta["vocab_size"], ckpt.meta["tokenizer_vocab_size"], c.vocab_size) == (50400, 50257, 50432)
    assert ours.blocks["0"].norm2 is None and ours.blocks["0"].attn.qkv.bias is None
    tokens = torch.randint(0, 50257, (2, 100), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (hf_model(tokens).logits - ours(tokens)[..., :50400]).abs().max().item() < 1e-4

        cache = KVCache(128)  # generation reads the same function a token at a time
        steps = [ours(tokens[:, :90], cache=cache)[:, -1]] + [ours(tokens[:, t : t + 1], cache=cache)[:, -1]
                                                              for t in range(90, 100)]
        assert torch.allclose(torch.stack(steps[1:], 1), ours(tokens)[:, 90:], atol=1e-5)

    assert export_hf(tmp_path / "ckpt", tmp_path / "back")["family"] == "gptj"
    original, back = load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(back) == sorted(original) and all(torch.equal(original[k], back[k]) for k in back)
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert (config["model_type"], config["rotary_dim"], config["vocab_size"]) == ("gptj", 4, 50400)
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        assert (again(tokens).logits - hf_model(tokens).logits).abs().max().item() < 1e-5


@pytest.mark.parametrize("damage", ["offsets past the end", "cut short", "not safetensors", "bad index"])
def test_a_safetensors_file_whose_header_lies_is_one_error(tmp_path, damage):
    import struct

    from safetensors.torch import save_file

    from textmill.errors import TextmillError
    from textmill.interop.hf import read_hf_weights

    weights = tmp_path / "model.safetensors"
    save_file({"wte": torch.zeros(4, 8), "wpe": torch.ones(2, 8)}, weights)
    data = weights.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + size])
    if damage == "offsets past the end":
        header["wpe"]["data_offsets"] = [0, 10**9]
        text = json.dumps(header).encode()
        weights.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + size :])
    elif damage == "cut short":
        weights.write_bytes(data[: len(data) - 20])
    elif damage == "not safetensors":
        weights.write_bytes(b"\xff" * 64)
    else:
        weights.unlink()
        (tmp_path / "model.safetensors.index.json").write_text("[1, 2]")
    with pytest.raises(TextmillError) as refused:
        read_hf_weights(tmp_path)
    assert len(str(refused.value).splitlines()) == 1


@pytest.mark.parametrize("named", ["../outside/model.safetensors", "/etc/model.safetensors", "sub/model.safetensors", ".."])
def test_a_shard_index_naming_a_file_outside_its_folder_is_refused(tmp_path, named):
    """A model.safetensors.index.json is followed only to files beside it: a path elsewhere (the file there is a
    real safetensors file) is one error line, and nothing is read from it."""
    import json

    from safetensors.torch import save_file

    from textmill.errors import TextmillError
    from textmill.interop.hf import read_hf_weights

    (tmp_path / "outside").mkdir()
    save_file({"wte": torch.zeros(4, 8)}, tmp_path / "outside" / "model.safetensors")
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    save_file({"wpe": torch.ones(2, 8)}, model / "part-1.safetensors")
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"wpe": "part-1.safetensors",
                                                                                  "wte": named}}))
    with pytest.raises(TextmillError, match="not a file of its folder"):
        read_hf_weights(model)
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"wpe": "part-1.safetensors"}}))
    assert set(read_hf_weights(model)) == {"wpe"}
