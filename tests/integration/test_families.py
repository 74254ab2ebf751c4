"""Model families beyond GPT-2 and plain LLaMA through `textmill import hf` / `export hf` and `textmill train`:
grouped-query attention with LLaMA 3.1's rope scaling, GPT-NeoX and GPT-J against transformers' own models,
and fine-tuning."""


import pytest
import torch

from support.cli import run_cli
from support.files import write_jsonl
from support.hf_models import TEXTS, write_hf_gptj, write_hf_llama
from textmill.trainer.checkpoint import load_model

transformers = pytest.importorskip("transformers")


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
    """docs/training.md's fine-tuning example, on a small LLaMA with grouped-query attention: import, tokenize with
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
    r = run_cli("tokenize", "--input", str(tmp_path / "docs.jsonl"), "--output-prefix", str(tmp_path / "ft"),
                "--append-eod", *own)
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
