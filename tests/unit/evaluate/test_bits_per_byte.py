"""Bits per byte of held-out text (evaluate/bits_per_byte.py), against a hand computation: a model that knows
nothing (every logit 0) gives log2(V) bits per predicted token; a trained-looking one gives what scoring each
token alone from the tokens before it gives."""

import math

import pytest
import torch

from support.files import TEST_DATA
from textmill.errors import TextmillError
from textmill.evaluate.bits_per_byte import bits_per_byte, read_texts, windows
from textmill.tokenizers.files import open_tokenizer
from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.model import GPT

TEXTS = ["The old sailor repaired the boat before the storm.", "Ünïcode bytes count as bytes: ß, 東京, 🙂.",
         "A third text, " + "long enough to need several windows of a short model, " * 6]


@pytest.fixture(scope="module")
def tokenizer():
    return open_tokenizer(TEST_DATA / "gpt2-vocab.json", TEST_DATA / "gpt2-merges.txt")


def model(tokenizer, positions: int, zero: bool = False) -> GPT:
    config = GPTConfig(vocab_size=tokenizer.vocab_size + 47, hidden_size=32, num_layers=2, num_attention_heads=4,
                       max_position_embeddings=positions)  # padded rows, as a trained model has them
    gpt = GPT(config, seed=3).eval()
    if zero:
        with torch.no_grad():
            gpt.wte.weight.zero_()  # tied: every logit is 0, every token as likely as the next
    return gpt


def test_a_model_that_knows_nothing_costs_log2_of_the_vocabulary_per_token(tokenizer):
    got = bits_per_byte(model(tokenizer, 32, zero=True), tokenizer, TEXTS, tokenizer.vocab_size, batch_size=2)
    tokens = sum(len(tokenizer.encode_plain(text)) for text in TEXTS)
    utf8 = sum(len(text.encode("utf-8")) for text in TEXTS)
    assert (got["tokens"], got["bytes"]) == (tokens, utf8)
    assert got["bits_per_byte"] == pytest.approx(tokens * math.log2(tokenizer.vocab_size) / utf8, rel=1e-6)


@pytest.mark.parametrize("positions", [16, 512])
def test_it_is_the_sum_of_each_tokens_surprise_over_the_bytes(tokenizer, positions):
    gpt = model(tokenizer, positions)
    nats = 0.0
    for text in TEXTS:  # by hand: one window at a time, one token at a time
        for inputs, targets in windows([tokenizer.eod, *tokenizer.encode_plain(text)], positions):
            log_probs = torch.log_softmax(gpt(torch.tensor([inputs]))[0, :, :tokenizer.vocab_size].double(), -1)
            nats -= sum(log_probs[i, t].item() for i, t in enumerate(targets))
    by_hand = nats / math.log(2) / sum(len(t.encode("utf-8")) for t in TEXTS)
    assert bits_per_byte(gpt, tokenizer, TEXTS, tokenizer.vocab_size, batch_size=3)["bits_per_byte"] == \
        pytest.approx(by_hand, rel=1e-5)


def test_windows_predict_every_token_after_the_first_once():
    tokens = list(range(11))
    pieces = windows(tokens, 4)
    assert [targets for _, targets in pieces] == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
    assert all(inputs[1:] == targets[:-1] and len(inputs) == len(targets) for inputs, targets in pieces)


def test_held_out_files_are_json_lines_of_texts_or_one_text(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "one"}\n\n{"text": "two"}\n')
    (tmp_path / "b.txt").write_text("a whole file\n\nof text\n")
    assert read_texts(tmp_path / "a.jsonl") == ["one", "two"]
    assert read_texts(tmp_path / "b.txt") == ["a whole file\n\nof text\n"]
    (tmp_path / "c.jsonl").write_text('{"text": "one"}\n{"words": 2}\n')
    (tmp_path / "d.txt").write_bytes(b"\xff\xfe")
    for name, said in (("c.jsonl", "c.jsonl:2: expected a JSON object"), ("d.txt", "not UTF-8"), ("e.txt", "No such")):
        with pytest.raises(TextmillError, match=said):
            read_texts(tmp_path / name)


def test_a_corpus_held_out_split_is_its_documents_decoded_back_to_their_text(tokenizer, tmp_path):
    """Each variant's own held-out text: the documents of the trainer's test range (its validation range when the
    test range is empty), read back from the token files as the text they were."""
    import json

    from textmill.evaluate.bits_per_byte import split_texts
    from textmill.tokenizers.preprocess import TokenizeConfig, dataset_prefix, tokenize_files

    texts = [f"Document {i}: ünïcode, spaces  and\nlines of its own. " * (1 + i % 3) for i in range(20)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    tokenize_files([tmp_path / "docs.jsonl"], tmp_path / "owt", tokenizer, TokenizeConfig(append_eod=True), progress=False)
    prefix = dataset_prefix(tmp_path / "owt", "text")
    assert split_texts(prefix, "80,10,10", tokenizer) == texts[18:]
    assert split_texts(prefix, "80,20,0", tokenizer) == texts[16:]
    assert split_texts(prefix, "80,20,0", tokenizer, limit=2) == texts[16:18]
    assert split_texts(prefix, "100,0,0", tokenizer) == []
