"""The tokenize stage with the documents that stopped it: a whitespace run of a million characters is
encoded as GPT-2 encodes it, and a document the encoder fails on is named, file and line."""

import pytest

from support.files import MERGES, VOCAB, write_jsonl
from textmill.errors import TextmillError
from textmill.megatron.indexed import IndexedDataset
from textmill.tokenizers.gpt2 import GPT2Tokenizer, ReferenceBPE, load_vocab_merges
from textmill.tokenizers.preprocess import TokenizeConfig, dataset_prefix, tokenize_files

TEXTS = ["An ordinary first document.", "a b " + "\n" * 1_200_000 + " end", "Then " + " " * 1_000_000 + "spaces.",
         "And an ordinary last one."]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_document_with_a_million_whitespace_characters_is_tokenized(tmp_path, workers):
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"text": t} for t in TEXTS])
    manifest = tokenize_files([docs], tmp_path / "out", GPT2Tokenizer(VOCAB, MERGES),
                              TokenizeConfig(append_eod=True, workers=workers), progress=False)
    assert manifest["counts"]["kept"] == len(TEXTS) and manifest["counts"]["rejected"] == 0
    dataset = IndexedDataset(dataset_prefix(tmp_path / "out", "text"))
    reference = ReferenceBPE(*load_vocab_merges(VOCAB, MERGES))
    assert [dataset[i].tolist() for i in range(len(dataset))] == [reference.encode(t) + [50256] for t in TEXTS]


def test_a_document_the_encoder_fails_on_is_named_by_its_line(tmp_path, monkeypatch):
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"text": f"document {i}"} for i in range(3000)])
    tokenizer = GPT2Tokenizer(VOCAB, MERGES)
    encode = tokenizer.encode_array

    def fails_on_one(text):
        if text == "document 2500":
            raise ValueError("the encoder gave up")
        return encode(text)

    monkeypatch.setattr(tokenizer, "encode_array", fails_on_one)
    with pytest.raises(TextmillError, match=r"^tokenize cannot encode the document at docs\.jsonl:2501 "
                                            r"\(ValueError: the encoder gave up\); no dataset written$"):
        tokenize_files([docs], tmp_path / "out", tokenizer, TokenizeConfig(workers=2), progress=False)
    assert not list(tmp_path.glob("out*"))
