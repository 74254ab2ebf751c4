"""LAMBADA through `textmill evaluate`, and `textmill export hf` / `import hf` against transformers."""

import json
import math
import random
import warnings

import pytest
import torch

from support.cli import run_cli
from support.files import TEST_DATA, write_jsonl
from support.training import train_config
from textmill.demo import synthweb
from textmill.evaluate.lambada import evaluate_lambada, make_cloze
from textmill.tokenizers.gpt2 import GPT2Tokenizer
from textmill.trainer.checkpoint import load_model
from textmill.trainer.train import Trainer

LAMBADA = TEST_DATA / "lambada_test.jsonl"


def held_out_passages(n, seed=11):
    """Passages of 10 to 80 words of generated prose the model was not trained on."""
    rng = random.Random(seed)
    return [{"text": " ".join(" ".join(synthweb.prose(rng, 1)).split()[: rng.randint(10, 80)])} for _ in range(n)]


def hf_reference(hf_model, clozes, vocab, positions):
    """Megatron's scoring one passage at a time, on the Hugging Face model: no batching, no padding."""
    correct, nll = 0, 0.0
    for c in clozes:
        tokens = (c.context + c.target)[-(positions + 1):]
        with torch.no_grad():
            logits = hf_model(torch.tensor([tokens[:-1]])).logits[0, -len(c.target):, :vocab]
        logprobs = torch.log_softmax(logits.float(), -1)
        correct += int(logprobs.argmax(-1).tolist() == c.target)
        nll -= sum(logprobs[i, t].item() for i, t in enumerate(c.target))
    return correct, math.exp(nll / len(clozes))


@pytest.mark.parametrize("strict", [False, True])
def test_lambada_equals_unbatched_reference_on_the_exported_model(gpt2_ckpt, tmp_path, strict):
    from transformers import AutoModelForCausalLM

    rows = held_out_passages(40)
    rows[3]["text"] = " ".join(synthweb.prose(random.Random(3), 40))  # longer than the 256 positions
    data = write_jsonl(tmp_path / "cloze.jsonl", rows)
    result = evaluate_lambada(gpt2_ckpt, data, strict=strict, batch_size=8, output=tmp_path / "result.json")
    assert json.loads((tmp_path / "result.json").read_text())["accuracy"] == result["accuracy"]
    assert result["total"] == 40 and result["truncated"] == 1

    assert run_cli("export", "hf", "--load", str(gpt2_ckpt), "--output", str(tmp_path / "hf")).returncode == 0
    hf_model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    tok = GPT2Tokenizer(gpt2_ckpt / "tokenizer" / "vocab.json", gpt2_ckpt / "tokenizer" / "merges.txt")
    clozes = [make_cloze(r["text"], tok, strict) for r in rows]
    correct, perplexity = hf_reference(hf_model, clozes, tok.vocab_size, 256)
    assert result["correct"] == correct
    assert result["perplexity"] == pytest.approx(perplexity, rel=1e-5)


def test_real_lambada_through_the_command(gpt2_ckpt, tmp_path):
    out = tmp_path / "lambada.json"
    r = run_cli("evaluate", "lambada", "--load", str(gpt2_ckpt), "--valid-data", str(LAMBADA), "--strict-lambada",
                "--output", str(out))
    assert r.returncode == 0, r.stderr
    assert "total examples: 5153 | avg accuracy:" in r.stdout and "evaluate lambada (strict)" in r.stdout
    result = json.loads(out.read_text())
    assert result["total"] == 5153 and result["strict"] and 0 <= result["accuracy"] <= 1
    assert result["valid_data_file"]["sha256"].startswith("4aa8d02c")
    assert result["perplexity"] > 1 and result["iteration"] == 20


# -- Hugging Face ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_export_loads_in_transformers_with_our_logits_and_generates(request, family, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    ckpt = request.getfixturevalue(f"{family}_ckpt")
    r = run_cli("export", "hf", "--load", str(ckpt), "--output", str(tmp_path / "hf"))
    assert r.returncode == 0, r.stderr
    assert f"export hf: {family} model" in r.stdout
    hf_model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(hf_model).__name__ == {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}[family]
    ours, _ = load_model(ckpt)
    tokens = torch.randint(0, 512, (3, 200), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (hf_model(tokens).logits - ours(tokens)[..., :512]).abs().max().item()
    assert diff < 1e-4

    # And back: the imported checkpoint is the same function.
    assert run_cli("import", "hf", str(tmp_path / "hf"), "--save", str(tmp_path / "back")).returncode == 0
    back, _ = load_model(tmp_path / "back")
    with torch.no_grad():
        assert torch.equal(back(tokens), ours(tokens))

    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    tok = GPT2Tokenizer(ckpt / "tokenizer" / "vocab.json", ckpt / "tokenizer" / "merges.txt")
    text = "The old sailor repaired one wooden garden near the kitchen in 1891."
    assert hf_tok(text)["input_ids"] == tok.encode(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = pipeline("text-generation", model=hf_model, tokenizer=hf_tok)("The old sailor", max_new_tokens=12, do_sample=False)
    assert out[0]["generated_text"].startswith("The old sailor") and len(out[0]["generated_text"]) > len("The old sailor")


def test_imported_model_evaluates_and_fine_tunes(corpus, gpt2_ckpt, tmp_path):
    """The release checkpoint an import writes is one `evaluate` and `train --load` accept."""
    assert run_cli("export", "hf", "--load", str(gpt2_ckpt), "--output", str(tmp_path / "hf")).returncode == 0
    assert run_cli("import", "hf", str(tmp_path / "hf"), "--save", str(tmp_path / "imported")).returncode == 0
    data = write_jsonl(tmp_path / "cloze.jsonl", held_out_passages(20))
    a = evaluate_lambada(gpt2_ckpt, data, output=tmp_path / "a.json")
    b = evaluate_lambada(tmp_path / "imported", data, output=tmp_path / "b.json")
    assert (a["correct"], a["perplexity"]) == (b["correct"], b["perplexity"]) and b["iteration"] == "release"
    trainer = Trainer(train_config(corpus, train_iters=2, load=tmp_path / "imported", hidden_dropout=0.0,
                                   save=tmp_path / "ft"))
    assert trainer.state.iteration == 0  # weights only: a release checkpoint starts training at 0
    assert trainer.train()["iterations"] == 2


def test_bad_input_is_one_clear_error(gpt2_ckpt, tmp_path):
    def error(*args):
        r = run_cli(*args)
        assert r.returncode == 2, r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("textmill: error: "), r.stderr
        return lines[0]

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a fine passage here"}\n{"txt": "no text key"}\n')
    assert f"{bad}:2:" in error("evaluate", "lambada", "--load", str(gpt2_ckpt), "--valid-data", str(bad))
    assert "no checkpoint" in error("evaluate", "lambada", "--load", str(tmp_path), "--valid-data", str(LAMBADA))
    mismatch = error("evaluate", "lambada", "--load", str(gpt2_ckpt), "--valid-data", str(LAMBADA),
                     "--vocab-file", str(TEST_DATA / "gpt2-vocab.json"), "--merge-file", str(TEST_DATA / "gpt2-merges.txt"))
    assert "50257 tokens" in mismatch and "512" in mismatch
    assert "config.json" in error("import", "hf", str(tmp_path), "--save", str(tmp_path / "x"))
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text('{"model_type": "bert", "vocab_size": 30522}')
    assert "'bert' cannot be imported" in error("import", "hf", str(tmp_path / "bert"), "--save", str(tmp_path / "x"))
