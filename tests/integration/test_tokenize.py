"""The tokenize stage against Megatron-LM: byte-identical to preprocess_data.py, read by megatron-core's
IndexedDataset, reading its IndexedDatasetBuilder's files, merged and blended as Megatron does."""

import json
import random

import numpy as np
import pyarrow.parquet as pq
import pytest

from support.cli import run_cli
from support.files import MERGES, TEST_DATA, VOCAB, write_jsonl
from support.hf_models import gpt2_tokenizer
from textmill.demo import synthweb
from textmill.megatron.indexed import IndexedDataset, IndexedDatasetWriter
from textmill.tokenizers.gpt2 import GPT2Tokenizer

GPT2_FILES = ("--vocab-file", str(VOCAB), "--merge-file", str(MERGES))


def corpus_rows(n: int = 120) -> list[dict]:
    rng = random.Random(11)
    lambada = [json.loads(line)["text"] for line in (TEST_DATA / "lambada_test.jsonl").open()][:n]
    rows = [{"text": t, "title": f"t{i}"} for i, t in enumerate(lambada)]
    rows += [{"text": "\n\n".join(synthweb.prose(rng, 3)), "title": "web"} for _ in range(n)]
    rows.insert(7, {"text": "", "title": "empty"})  # Megatron keeps it as a document with no sequence
    rows.insert(9, {"text": "Ünïcödé 日本語 👍🏽  \n\n\t tabs", "title": "unicode"})
    return rows


def megatron_preprocess(lines: list[str], tokenize, eod: int, vocab_size: int, append_eod: bool, prefix) -> None:
    """What tools/preprocess_data.py does for one --json-keys text in document mode: Encoder.encode on
    each line, then IndexedDatasetBuilder.add_document with the sentence lengths, then finalize."""
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=DType.optimal_dtype(vocab_size))
    for line in lines:
        doc_ids, sentence_lens = [], []
        for sentence in [json.loads(line)["text"]]:
            sentence_ids = tokenize(sentence)
            if len(sentence_ids) > 0:
                doc_ids.extend(sentence_ids)
                sentence_lens.append(len(sentence_ids))
        if len(doc_ids) > 0 and append_eod:
            doc_ids.append(eod)
            sentence_lens[-1] += 1
        builder.add_document(doc_ids, sentence_lens)
    builder.finalize(f"{prefix}.idx")


@pytest.mark.parametrize("append_eod", [True, False])
def test_bin_idx_are_byte_identical_to_megatron_preprocess_data(tmp_path, append_eod):
    from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexedDataset

    rows = corpus_rows()
    docs = write_jsonl(tmp_path / "docs.jsonl", rows)
    hf = gpt2_tokenizer(tmp_path, VOCAB, MERGES)  # HEAD's GPT2BPETokenizer is HF's tokenizer
    megatron_preprocess(docs.read_text().splitlines(), hf.encode, 50256, 50257, append_eod, tmp_path / "megatron")

    args = ("--append-eod",) if append_eod else ("--no-append-eod",)  # appending is textmill's default, not Megatron's
    r = run_cli("tokenize", "--input", str(docs), "--output-prefix", str(tmp_path / "ours"), *GPT2_FILES, *args)
    assert r.returncode == 0, r.stderr
    assert f"{len(rows)} documents in, {len(rows)} written, 0 rejected" in r.stdout
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours_text_document{suffix}").read_bytes() == (tmp_path / f"megatron{suffix}").read_bytes()

    # megatron-core reads ours: the same tokens and document boundaries.
    theirs = MegatronIndexedDataset(str(tmp_path / "ours_text_document"))
    tok = GPT2Tokenizer(VOCAB, MERGES)
    expected = [tok.encode(r["text"]) + ([50256] if append_eod else []) for r in rows if r["text"]]
    assert [theirs[i].tolist() for i in range(len(theirs))] == expected
    assert theirs.document_indices[7] == theirs.document_indices[8] == 7  # the empty document


def test_bad_records_are_counted_with_line_numbers_and_never_dropped(tmp_path):
    good = [json.dumps({"text": f"document number {i}."}) for i in range(6)]
    lines = [good[0], "{not json", good[1], json.dumps({"body": "x"}), json.dumps({"text": ["a", "b"]}),
             good[2], json.dumps([1, 2]), good[3], good[4], good[5]]
    path = tmp_path / "docs.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode() + b'{"text": "caf\xe9"}\n')
    r = run_cli("tokenize", "--input", str(path), "--output-prefix", str(tmp_path / "out"), *GPT2_FILES, "--append-eod")
    assert r.returncode == 0, r.stderr
    assert "11 documents in, 6 written, 5 rejected" in r.stdout
    assert "first: docs.jsonl:2: invalid_json" in r.stdout
    rejects = [json.loads(line) for line in (tmp_path / "out.rejects.jsonl").read_text().splitlines()]
    assert [(x["where"], x["reason"]) for x in rejects] == [
        ("docs.jsonl:2", "invalid_json"), ("docs.jsonl:4", "missing_key=text"), ("docs.jsonl:5", "non_string=text"),
        ("docs.jsonl:7", "not_an_object"), ("docs.jsonl:11", "undecodable")]
    manifest = json.loads((tmp_path / "out.manifest.json").read_text())
    assert manifest["counts"]["kept"] + manifest["counts"]["rejected"] == manifest["counts"]["input"] == 11
    ds = IndexedDataset(tmp_path / "out_text_document")
    tok = GPT2Tokenizer(VOCAB, MERGES)
    assert [tok.decode(ds[i].tolist()) for i in range(len(ds))] == [f"document number {i}.<|endoftext|>" for i in range(6)]


def test_endoftext_inside_a_document_is_text_by_default_and_the_special_id_when_asked(tmp_path):
    """--endoftext text (the default) encodes it as Megatron-LM's legacy GPT-2 tokenizer does; special as
    Megatron-LM today does (tests/unit/tokenizers/test_gpt2.py checks both against their references)."""
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"text": "a<|endoftext|>b"}) + "\n")
    found = {}
    for mode in ("text", "special"):
        r = run_cli("tokenize", "--input", str(path), "--output-prefix", str(tmp_path / mode), *GPT2_FILES,
                    "--append-eod", "--endoftext", mode)
        assert r.returncode == 0, r.stderr
        found[mode] = IndexedDataset(tmp_path / f"{mode}_text_document")[0].tolist()
    assert found["special"] == [64, 50256, 65, 50256]
    assert found["text"] == GPT2Tokenizer(VOCAB, MERGES).encode("a<|endoftext|>b") + [50256] and len(found["text"]) > 4


def test_shuffle_stage_parquet_in_any_worker_count_gives_the_same_bytes(tmp_path):
    rows = [r for r in corpus_rows(60) if r["text"]]
    docs = write_jsonl(tmp_path / "docs.jsonl", rows)
    assert run_cli("shuffle", str(docs), "--output", str(tmp_path / "shuf"), "--num-shards", "3").returncode == 0
    outputs = []
    for workers in ("1", "3"):
        prefix = tmp_path / f"w{workers}"
        r = run_cli("tokenize", "--input", str(tmp_path / "shuf"), "--output-prefix", str(prefix), *GPT2_FILES,
                    "--append-eod", "--workers", workers)
        assert r.returncode == 0, r.stderr
        assert "3 file(s)" in r.stdout
        outputs.append([(tmp_path / f"w{workers}_text_document{s}").read_bytes() for s in (".bin", ".idx")])
    assert outputs[0] == outputs[1]
    # Documents in shard order, then row order within each shard.
    texts = [t for part in sorted((tmp_path / "shuf").glob("part-*[0-9].parquet"))
             for t in pq.read_table(part, columns=["text"]).column("text").to_pylist()]
    assert sorted(texts) == sorted(r["text"] for r in rows)
    ds, tok = IndexedDataset(tmp_path / "w1_text_document"), GPT2Tokenizer(VOCAB, MERGES)
    assert [ds[i].tolist() for i in range(len(ds))] == [tok.encode(t) + [tok.eod] for t in texts]


def test_a_failing_input_leaves_no_dataset(tmp_path):
    import pyarrow as pa

    docs = write_jsonl(tmp_path / "docs.jsonl", [{"text": "fine"}])
    pq.write_table(pa.table({"body": ["x", "y"]}), tmp_path / "b.parquet")
    r = run_cli("tokenize", "--input", str(docs), str(tmp_path / "b.parquet"), "--output-prefix", str(tmp_path / "out"),
                *GPT2_FILES)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"textmill: error: {tmp_path / 'b.parquet'}: no column 'text' (columns: body)"]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(("out", ".out"))]


def test_without_a_vocabulary_a_bpe_is_trained_on_the_input(tmp_path):
    rows = [r for r in corpus_rows(80) if r["text"]]
    docs = write_jsonl(tmp_path / "docs.jsonl", rows)
    r = run_cli("tokenize", "--input", str(docs), "--output-prefix", str(tmp_path / "own"), "--vocab-size", "700",
                "--no-append-eod")
    assert r.returncode == 0, r.stderr
    assert "train-tokenizer: 700-token byte-level BPE" in r.stdout
    tok = GPT2Tokenizer(tmp_path / "own-vocab.json", tmp_path / "own-merges.txt")
    ds = IndexedDataset(tmp_path / "own_text_document")
    assert ds.dtype == np.uint16 and len(ds) == len(rows)
    assert [tok.decode(ds[i].tolist()) for i in range(len(ds))] == [r["text"] for r in rows]


def test_merge_datasets_in_name_order_like_megatron(tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    parts = tmp_path / "parts"
    for name, docs in (("owt_00001", [[7, 8], [9]]), ("owt_00000", [[1, 2, 3]]), ("owt_00002", [[4], [], [5, 6]])):
        w = IndexedDatasetWriter(parts / name, np.uint16)
        for d in docs:
            w.add_document(d)
        w.finalize()
    r = run_cli("merge-datasets", "--input", str(parts), "--output-prefix", str(tmp_path / "merged"))
    assert r.returncode == 0, r.stderr
    assert "3 dataset(s), 6 documents, 9 tokens" in r.stdout
    builder = IndexedDatasetBuilder(str(tmp_path / "megatron.bin"), dtype=np.uint16)
    for name in ("owt_00000", "owt_00001", "owt_00002"):
        builder.add_index(str(parts / name))
    builder.finalize(str(tmp_path / "megatron.idx"))
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"merged{suffix}").read_bytes() == (tmp_path / f"megatron{suffix}").read_bytes()
    (parts / "stray.idx").write_bytes(b"")
    r = run_cli("merge-datasets", "--input", str(parts), "--output-prefix", str(tmp_path / "again"))
    assert r.returncode == 2 and "stray: has no .bin file" in r.stderr
