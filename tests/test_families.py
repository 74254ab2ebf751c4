"""Model families beyond GPT-2 and plain LLaMA: grouped-query (and multi-query) attention with LLaMA 3.1's
rope scaling, GPT-NeoX and GPT-J, in and out of Hugging Face against transformers' own models, with the KV
cache, fine-tuning and Megatron's flags."""

import json
import shutil

import pytest
import torch
from conftest import TEST_DATA, run_cli, write_jsonl
from test_hf_tokenizer import llama_style_tokenizer

from textmill.cli import build_parser
from textmill.errors import TextmillError
from textmill.settings import from_namespace
from textmill.trainer.checkpoint import load_model
from textmill.trainer.config import GPTConfig, TrainConfig, model_config
from textmill.trainer.model import GPT, KVCache

transformers = pytest.importorskip("transformers")

TEXTS = ["The old sailor repaired one wooden garden near the kitchen in 1891.",
         "Every morning the baker opens his shop before the sun is up and sells bread.",
         "Children walk to the school that stands at the end of the lane by the church."] * 5


def write_hf_llama(folder, kv_heads: int, **config):
    """A randomly initialised transformers LLaMA with `kv_heads` key/value heads and LLaMA 3.1's rope
    scaling (original context 32 positions, so it changes the low frequencies of a 128-position model),
    saved with its own tokenizer as save_pretrained writes them."""
    tokenizer = llama_style_tokenizer(folder, TEXTS)
    torch.manual_seed(0)
    hf_config = transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=kv_heads, num_hidden_layers=2, intermediate_size=128,
        vocab_size=len(tokenizer), max_position_embeddings=128, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 32}, **config)
    model = transformers.LlamaForCausalLM(hf_config).eval()
    model.save_pretrained(folder)
    return model, tokenizer


@pytest.mark.parametrize("kv_heads", [2, 1], ids=["grouped-query", "multi-query"])
def test_import_hf_llama_with_grouped_query_attention_keeps_its_function_and_round_trips(tmp_path, kv_heads):
    from safetensors.torch import load_file

    hf_model, tokenizer = write_hf_llama(tmp_path / "hf", kv_heads)
    r = run_cli("import", "hf", str(tmp_path / "hf"), "--save", str(tmp_path / "ckpt"))
    assert r.returncode == 0, r.stderr
    ours, ckpt = load_model(tmp_path / "ckpt")
    assert ours.config.kv_heads == kv_heads and ours.config.rope_scaling == "llama3"
    assert ours.blocks["0"].attn.qkv.weight.shape == ((4 + 2 * kv_heads) * 16, 64)
    vocab = len(tokenizer)
    tokens = torch.randint(0, vocab, (2, 100), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (hf_model(tokens).logits - ours(tokens)[..., :vocab]).abs().max().item() < 1e-4
    assert (tmp_path / "ckpt" / "tokenizer" / "tokenizer.json").is_file()  # the model's own tokenizer came along

    r = run_cli("export", "hf", "--load", str(tmp_path / "ckpt"), "--output", str(tmp_path / "back"))
    assert r.returncode == 0, r.stderr
    original, back = load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(back) == sorted(original) and all(torch.equal(original[k], back[k]) for k in back)
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["num_key_value_heads"] == kv_heads and config["rope_parameters"]["rope_type"] == "llama3"
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    exported_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "back")
    assert exported_tokenizer(TEXTS[0]).input_ids == tokenizer(TEXTS[0]).input_ids
    with torch.no_grad():
        assert (again(tokens).logits - hf_model(tokens).logits).abs().max().item() < 1e-5


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


def test_query_groups_that_tensor_parallelism_cannot_split_are_one_error_line(corpus):
    """Two groups of three query heads over three ranks: neither whole groups per rank nor one group's
    share (G divisible by TP, or TP by G: see test_parallel.py for both)."""
    r = run_cli("train", "--data-path", str(corpus["prefix"]), "--vocab-file", str(corpus["vocab"]), "--merge-file",
                str(corpus["merges"]), "--train-iters", "1", "--num-attention-heads", "6", "--hidden-size", "96",
                "--group-query-attention", "--num-query-groups", "2", "--tensor-model-parallel-size", "3",
                "--nproc-per-node", "3")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "textmill: error: --num-query-groups 2 and --tensor-model-parallel-size 3: one must divide the other"], r.stderr


def test_fine_tuning_an_imported_model_on_token_files_made_with_its_own_tokenizer(tmp_path, corpus):
    """The README's fine-tuning example, on a small LLaMA with grouped-query attention: import, tokenize with
    the model's tokenizer (which came along into the checkpoint), fine-tune, evaluate, export."""
    import random

    from textmill.demo import synthweb

    write_hf_llama(tmp_path / "hf", 2)
    assert run_cli("import", "hf", str(tmp_path / "hf"), "--save", str(tmp_path / "imported")).returncode == 0
    rng = random.Random(5)
    write_jsonl(tmp_path / "docs.jsonl", [{"text": "\n\n".join(synthweb.prose(rng, 2))} for _ in range(80)])
    own = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(tmp_path / "imported" / "tokenizer")]
    r = run_cli("tokenize", "--input", str(tmp_path / "docs.jsonl"), "--output-prefix", str(tmp_path / "ft"), *own)
    assert r.returncode == 0, r.stderr
    schedule = ["--micro-batch-size", "2", "--global-batch-size", "4", "--seq-length", "64", "--split", "90,10,0",
                "--eval-interval", "4", "--eval-iters", "1", "--lr", "1e-4", "--lr-warmup-iters", "1"]
    r = run_cli("train", "--data-path", str(tmp_path / "ft_text_document"), *own, "--load", str(tmp_path / "imported"),
                "--finetune", "--use-checkpoint-args", "--train-iters", "4", *schedule, "--save", str(tmp_path / "tuned"))
    assert r.returncode == 0, r.stderr[-2000:]
    imported, _ = load_model(tmp_path / "imported")
    tuned, ckpt = load_model(tmp_path / "tuned")
    assert tuned.config.architecture() == imported.config.architecture() and ckpt.meta["iteration"] == 4
    assert not torch.equal(tuned.blocks["0"].attn.qkv.weight, imported.blocks["0"].attn.qkv.weight)

    write_jsonl(tmp_path / "cloze.jsonl", [{"text": t} for t in TEXTS[:3]])
    r = run_cli("evaluate", "lambada", "--load", str(tmp_path / "tuned"), "--valid-data", str(tmp_path / "cloze.jsonl"))
    assert r.returncode == 0 and "total examples: 3" in r.stdout, r.stderr
    r = run_cli("export", "hf", "--load", str(tmp_path / "tuned"), "--output", str(tmp_path / "tuned-hf"))
    assert r.returncode == 0, r.stderr
    exported = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "tuned-hf").eval()
    tokens = torch.randint(0, 300, (1, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        vocab = exported.config.vocab_size
        assert (exported(tokens).logits - tuned(tokens)[..., :vocab]).abs().max().item() < 1e-4

    # Token files made with another vocabulary: one line naming both sizes.
    r = run_cli("train", "--data-path", str(corpus["prefix"]), "--vocab-file", str(corpus["vocab"]), "--merge-file",
                str(corpus["merges"]), "--load", str(tmp_path / "imported"), "--finetune", "--use-checkpoint-args",
                "--train-iters", "1", *schedule)
    vocab = len(transformers.AutoTokenizer.from_pretrained(tmp_path / "hf"))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"textmill: error: {tmp_path / 'imported'}: the model's vocabulary has {vocab} tokens, the tokenizer of the "
        f"token files 512; tokenize with the model's own tokenizer (kept in {tmp_path / 'imported'}/tokenizer)"], r.stderr


@pytest.mark.parametrize("parallel_residual", [True, False], ids=["parallel-residual", "sequential"])
def test_import_hf_gpt_neox_keeps_its_function_and_round_trips(tmp_path, parallel_residual):
    """GPT-NeoX's blocks: rotary embeddings on a quarter of each head (rotate-half), attention and MLP from
    one input with one residual add (use_parallel_residual), biases, an untied output layer."""
    from safetensors.torch import load_file

    tokenizer = llama_style_tokenizer(tmp_path / "hf", TEXTS)
    torch.manual_seed(0)
    hf_model = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=256, vocab_size=len(tokenizer),
        max_position_embeddings=128, rotary_pct=0.25, use_parallel_residual=parallel_residual,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)).eval()
    hf_model.save_pretrained(tmp_path / "hf")
    r = run_cli("import", "hf", str(tmp_path / "hf"), "--save", str(tmp_path / "ckpt"))
    assert r.returncode == 0, r.stderr
    ours, _ = load_model(tmp_path / "ckpt")
    assert (ours.config.rotary_dim, ours.config.parallel_residual) == (4, parallel_residual)
    tokens = torch.randint(0, len(tokenizer), (2, 100), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (hf_model(tokens).logits - ours(tokens)[..., :len(tokenizer)]).abs().max().item() < 1e-4

    r = run_cli("export", "hf", "--load", str(tmp_path / "ckpt"), "--output", str(tmp_path / "back"))
    assert r.returncode == 0 and "export hf: gpt_neox model" in r.stdout, r.stderr
    original, back = load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(back) == sorted(original) and all(torch.equal(original[k], back[k]) for k in back)
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        assert (again(tokens).logits - hf_model(tokens).logits).abs().max().item() < 1e-5


def write_hf_gptj(folder):
    """A randomly initialised transformers GPT-J shaped as GPT-J 6B is, small: rotary embeddings on a quarter of
    each head, and 50400 embedding rows for the real GPT-2 vocabulary's 50257 tokens, saved with that
    vocabulary's vocab.json and merges.txt. Biases and norms are drawn too (transformers starts them at 0 and 1,
    which would leave the output layer's bias untested)."""
    torch.manual_seed(0)
    hf_model = transformers.GPTJForCausalLM(transformers.GPTJConfig(
        n_embd=64, n_head=4, n_layer=2, n_positions=128, rotary_dim=4, vocab_size=50400)).eval()
    with torch.no_grad():
        for name, p in hf_model.named_parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    hf_model.save_pretrained(folder)
    shutil.copyfile(TEST_DATA / "gpt2-vocab.json", folder / "vocab.json")
    shutil.copyfile(TEST_DATA / "gpt2-merges.txt", folder / "merges.txt")
    return hf_model


def test_import_hf_gptj_keeps_its_function_and_round_trips(tmp_path):
    """GPT-J's blocks: rotary embeddings on neighbouring pairs of a quarter of each head, one LayerNorm read
    by attention and MLP alike, no attention biases, an untied output layer with a bias."""
    from safetensors.torch import load_file

    hf_model = write_hf_gptj(tmp_path / "hf")
    r = run_cli("import", "hf", str(tmp_path / "hf"), "--save", str(tmp_path / "ckpt"))
    assert r.returncode == 0, r.stderr
    ours, ckpt = load_model(tmp_path / "ckpt")
    c = ours.config
    assert (c.rotary_dim, c.rotary_interleaved, c.shared_input_norm, c.attention_bias, c.output_bias) == (4, True, True, False, True)
    assert (ckpt.meta["vocab_size"], ckpt.meta["tokenizer_vocab_size"], c.vocab_size) == (50400, 50257, 50432)
    assert ours.blocks["0"].norm2 is None and ours.blocks["0"].attn.qkv.bias is None
    tokens = torch.randint(0, 50257, (2, 100), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (hf_model(tokens).logits - ours(tokens)[..., :50400]).abs().max().item() < 1e-4

        cache = KVCache(128)  # generation reads the same function a token at a time
        steps = [ours(tokens[:, :90], cache=cache)[:, -1]] + [ours(tokens[:, t : t + 1], cache=cache)[:, -1]
                                                              for t in range(90, 100)]
        assert torch.allclose(torch.stack(steps[1:], 1), ours(tokens)[:, 90:], atol=1e-5)

    r = run_cli("export", "hf", "--load", str(tmp_path / "ckpt"), "--output", str(tmp_path / "back"))
    assert r.returncode == 0 and "export hf: gptj model" in r.stdout, r.stderr
    original, back = load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(back) == sorted(original) and all(torch.equal(original[k], back[k]) for k in back)
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert (config["model_type"], config["rotary_dim"], config["vocab_size"]) == ("gptj", 4, 50400)
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        assert (again(tokens).logits - hf_model(tokens).logits).abs().max().item() < 1e-5


def test_fine_tuning_a_model_with_more_embedding_rows_than_tokens(tmp_path):
    """GPT-J's 50400 rows for GPT-2's 50257 tokens: token files made with the model's own tokenizer fine-tune it,
    and the export keeps all 50400 rows, so the model is the same shape as the one imported."""
    import random

    from textmill.demo import synthweb

    write_hf_gptj(tmp_path / "hf")
    assert run_cli("import", "hf", str(tmp_path / "hf"), "--save", str(tmp_path / "imported")).returncode == 0
    rng = random.Random(6)
    write_jsonl(tmp_path / "docs.jsonl", [{"text": "\n\n".join(synthweb.prose(rng, 2))} for _ in range(40)])
    own = ["--vocab-file", str(tmp_path / "imported" / "tokenizer" / "vocab.json"),
           "--merge-file", str(tmp_path / "imported" / "tokenizer" / "merges.txt")]
    r = run_cli("tokenize", "--input", str(tmp_path / "docs.jsonl"), "--output-prefix", str(tmp_path / "ft"), "--append-eod", *own)
    assert r.returncode == 0, r.stderr
    r = run_cli("train", "--data-path", str(tmp_path / "ft_text_document"), *own, "--load", str(tmp_path / "imported"),
                "--finetune", "--use-checkpoint-args", "--train-iters", "2", "--micro-batch-size", "2",
                "--global-batch-size", "2", "--seq-length", "64", "--split", "100,0,0", "--lr", "1e-4",
                "--save", str(tmp_path / "tuned"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "vocab 50257 (the model's 50400) padded to 50432" in r.stdout
    tuned, ckpt = load_model(tmp_path / "tuned")
    assert (ckpt.meta["vocab_size"], ckpt.meta["tokenizer_vocab_size"]) == (50400, 50257)
    r = run_cli("export", "hf", "--load", str(tmp_path / "tuned"), "--output", str(tmp_path / "tuned-hf"))
    assert r.returncode == 0, r.stderr
    exported = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "tuned-hf").eval()
    assert exported.config.vocab_size == 50400
    tokens = torch.randint(0, 50257, (1, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (exported(tokens).logits - tuned(tokens)[..., :50400]).abs().max().item() < 1e-4


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
