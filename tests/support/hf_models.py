"""Small Hugging Face models and tokenizers made here (no hub access), saved as save_pretrained writes them."""

import json
import shutil

from support.files import MERGES, VOCAB

TEXTS = ["The old sailor repaired one wooden garden near the kitchen in 1891.",
         "Every morning the baker opens his shop before the sun is up and sells bread.",
         "Children walk to the school that stands at the end of the lane by the church."] * 5


def gpt2_tokenizer(tmp_path, vocab=VOCAB, merges=MERGES):
    """transformers' GPT-2 tokenizer from a local folder holding the two files."""
    from transformers import GPT2Tokenizer as HFGPT2Tokenizer

    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "vocab.json").write_bytes(vocab.read_bytes())
    (folder / "merges.txt").write_bytes(merges.read_bytes())
    hf = HFGPT2Tokenizer.from_pretrained(folder)
    assert len(hf) == len(json.loads(vocab.read_text()))  # an empty tokenizer would agree on "" only
    return hf


def llama_style_tokenizer(folder, texts: list[str]):
    """A small byte-level BPE trained here, which puts <s> before every text."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                                unk_token="<unk>")
    fast.save_pretrained(folder)
    return transformers.AutoTokenizer.from_pretrained(folder)


def write_hf_llama(folder, kv_heads: int, **config):
    """A randomly initialised transformers LLaMA with `kv_heads` key/value heads and LLaMA 3.1's rope
    scaling (original context 32 positions, so it changes the low frequencies of a 128-position model),
    saved with its own tokenizer."""
    import torch
    import transformers

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


def write_hf_gptj(folder):
    """A randomly initialised transformers GPT-J shaped as GPT-J 6B is, small: rotary embeddings on a quarter of
    each head, and 50400 embedding rows for the real GPT-2 vocabulary's 50257 tokens, saved with that
    vocabulary's vocab.json and merges.txt. Biases and norms are drawn too (transformers starts them at 0 and 1,
    which would leave the output layer's bias untested)."""
    import torch
    import transformers

    torch.manual_seed(0)
    hf_model = transformers.GPTJForCausalLM(transformers.GPTJConfig(
        n_embd=64, n_head=4, n_layer=2, n_positions=128, rotary_dim=4, vocab_size=50400)).eval()
    with torch.no_grad():
        for p in hf_model.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    hf_model.save_pretrained(folder)
    shutil.copyfile(VOCAB, folder / "vocab.json")
    shutil.copyfile(MERGES, folder / "merges.txt")
    return hf_model
