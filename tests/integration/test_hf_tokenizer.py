"""Megatron's `--tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR`: `textmill tokenize` encodes with
a local Hugging Face tokenizer folder exactly as transformers does (its BOS included), and `textmill train`
takes its vocabulary size from it and keeps the folder's files with the checkpoints."""

import json
import random

import pytest

from support.cli import run_cli
from support.files import write_jsonl
from support.hf_models import llama_style_tokenizer
from textmill.demo import synthweb
from textmill.megatron.indexed import IndexedDataset
from textmill.trainer.checkpoint import checkpoint_tokenizer, load_checkpoint

transformers = pytest.importorskip("transformers")


def test_tokenize_and_train_with_a_hugging_face_tokenizer_folder(tmp_path):
    rng = random.Random(3)
    texts = ["\n\n".join(synthweb.prose(rng, 2)) for _ in range(60)] + ["naïve café — 東京 <|endoftext|> </s>"]
    write_jsonl(tmp_path / "docs.jsonl", [{"text": t} for t in texts])
    reference = llama_style_tokenizer(tmp_path / "tok", texts[:40])

    r = run_cli("tokenize", "--input", str(tmp_path / "docs.jsonl"), "--output-prefix", str(tmp_path / "hf"),
                "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(tmp_path / "tok"))
    assert r.returncode == 0, r.stderr
    data = IndexedDataset(tmp_path / "hf_text_document")
    expected = [reference(t).input_ids + [reference.eos_token_id] for t in texts]
    assert [data[i].tolist() for i in range(len(data))] == expected
    assert all(ids[0] == reference.bos_token_id for ids in expected)
    shown = run_cli("inspect", str(tmp_path / "hf_text_document"), "--tokenizer-model", str(tmp_path / "tok"), "--head", "1")
    assert shown.returncode == 0 and f"<s>{texts[0][:40]}" in shown.stdout, shown.stdout + shown.stderr
    manifest = json.loads((tmp_path / "hf.manifest.json").read_text())
    assert manifest["params"]["vocab_size"] == len(reference)
    assert {f["path"].rsplit("/", 1)[-1] for f in manifest["params"]["tokenizer_files"]} >= {"tokenizer.json",
                                                                                            "tokenizer_config.json"}

    train = run_cli("train", "--data-path", str(tmp_path / "hf_text_document"), "--tokenizer-type",
                    "HuggingFaceTokenizer", "--tokenizer-model", str(tmp_path / "tok"), "--num-layers", "2",
                    "--hidden-size", "32", "--num-attention-heads", "4", "--max-position-embeddings", "64",
                    "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters", "2",
                    "--split", "90,10,0", "--eval-interval", "2", "--eval-iters", "1", "--save", str(tmp_path / "ckpt"))
    assert train.returncode == 0, train.stderr[-2000:]
    kept = tmp_path / "ckpt" / "tokenizer"
    assert (kept / "tokenizer.json").read_bytes() == (tmp_path / "tok" / "tokenizer.json").read_bytes()
    ckpt = load_checkpoint(tmp_path / "ckpt")
    assert ckpt.meta["vocab_size"] == len(reference)
    tokenizer = checkpoint_tokenizer(tmp_path / "ckpt", ckpt.meta)  # what evaluate, generate and export use
    assert tokenizer.encode(texts[0]) == reference(texts[0]).input_ids and tokenizer.eod == reference.eos_token_id


@pytest.mark.parametrize("options, message", [
    (["--tokenizer-type", "HuggingFaceTokenizer"], "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model"),
    (["--tokenizer-model", "{tmp}"], "--tokenizer-model goes with --tokenizer-type HuggingFaceTokenizer"),
    (["--tokenizer-model", "{tmp}", "--tokenizer-type", "HuggingFaceTokenizer"], "no tokenizer.json there"),
])
def test_a_missing_or_wrong_tokenizer_folder_is_one_error_line(tmp_path, options, message):
    write_jsonl(tmp_path / "docs.jsonl", [{"text": "hello"}])
    options = [o.replace("{tmp}", str(tmp_path)) for o in options]
    r = run_cli("tokenize", "--input", str(tmp_path / "docs.jsonl"), "--output-prefix", str(tmp_path / "x"), *options)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
