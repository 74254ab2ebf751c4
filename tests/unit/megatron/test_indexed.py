"""Megatron-LM's mmap .bin/.idx format: the worked example byte for byte, megatron-core's builder files read by
ours, indexes written in chunks, merges, damaged files, and the dtype rule."""

import struct

import numpy as np
import pytest

from textmill.errors import TextmillError
from textmill.megatron.indexed import IndexedDataset, IndexedDatasetWriter, merge_datasets, optimal_dtype


def test_worked_example_layout(tmp_path):
    """docs/REFERENCE.md section 1.2: 3 documents of 5, 3 and 4 tokens in uint16 -> 24-byte .bin, 102-byte .idx."""
    w = IndexedDatasetWriter(tmp_path / "ex", np.uint16)
    for doc in ([1, 2, 3, 4, 5], [6, 7, 8], [9, 10, 11, 50256]):
        w.add_document(doc)
    w.finalize()
    idx = (tmp_path / "ex.idx").read_bytes()
    assert (tmp_path / "ex.bin").stat().st_size == 24 and len(idx) == 102
    assert idx[:9] == b"MMIDIDX\x00\x00"
    assert struct.unpack("<QBQQ", idx[9:34]) == (1, 8, 3, 4)
    assert np.frombuffer(idx, np.int32, 3, 34).tolist() == [5, 3, 4]
    assert np.frombuffer(idx, np.int64, 3, 46).tolist() == [0, 10, 16]
    assert np.frombuffer(idx, np.int64, 4, 70).tolist() == [0, 1, 2, 3]
    ds = IndexedDataset(tmp_path / "ex")
    assert [ds[i].tolist() for i in range(3)] == [[1, 2, 3, 4, 5], [6, 7, 8], [9, 10, 11, 50256]]
    assert ds.num_documents == 3


def test_the_index_written_in_small_chunks_is_the_same_and_leaves_no_scratch(tmp_path, monkeypatch):
    import textmill.megatron.indexed as indexed

    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50000, size=int(n)) for n in rng.integers(0, 40, size=101)]  # some empty
    for name, chunk in (("whole", indexed._CHUNK), ("chunked", 7)):
        monkeypatch.setattr(indexed, "_CHUNK", chunk)
        for part in range(3):
            w = IndexedDatasetWriter(tmp_path / name / f"part{part}", np.uint16)
            w.add_documents(np.concatenate(docs[part::3]), [d.size for d in docs[part::3]])
            w.finalize()
        merge_datasets([tmp_path / name / f"part{p}" for p in range(3)], tmp_path / name / "merged")
    for file in ("part0.idx", "merged.idx", "merged.bin"):
        assert (tmp_path / "chunked" / file).read_bytes() == (tmp_path / "whole" / file).read_bytes(), file
    merged = IndexedDataset(tmp_path / "chunked" / "merged")
    ordered = [d for part in range(3) for d in docs[part::3]]
    assert [merged[i].tolist() for i in range(len(merged))] == [d.tolist() for d in ordered if d.size]
    assert merged.num_documents == len(ordered)
    assert sorted(p.name for p in (tmp_path / "chunked").iterdir() if p.name.startswith(".")) == []


def test_merge_and_corruption_errors(tmp_path):
    for name, docs in (("a", [[1, 2], [3]]), ("b", [[4, 5, 6]])):
        w = IndexedDatasetWriter(tmp_path / name, np.int32)
        for d in docs:
            w.add_document(d)
        w.finalize()
    merged = merge_datasets([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    assert [merged[i].tolist() for i in range(3)] == [[1, 2], [3], [4, 5, 6]]
    assert merged.doc_indices.tolist() == [0, 1, 2, 3]
    (tmp_path / "m.bin").write_bytes((tmp_path / "m.bin").read_bytes()[:-4])
    with pytest.raises(TextmillError, match="the index says 24"):
        IndexedDataset(tmp_path / "m")
    with pytest.raises(TextmillError, match="not found"):
        IndexedDataset(tmp_path / "nope")


def test_the_token_dtype_is_megatrons():
    assert optimal_dtype(50257) is np.uint16 and optimal_dtype(65500) is np.int32


def test_megatron_builder_files_read_by_ours(tmp_path):
    """Old-style add_item/end_document with several sequences per document, in int32."""
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    rng = np.random.default_rng(0)
    docs = [[rng.integers(0, 70000, rng.integers(1, 40)) for _ in range(rng.integers(1, 4))] for _ in range(50)]
    builder = IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=np.int32)
    for doc in docs:
        for seq in doc:
            builder.add_item(torch.tensor(seq))
        builder.end_document()
    builder.finalize(str(tmp_path / "m.idx"))
    ours = IndexedDataset(tmp_path / "m")
    assert ours.dtype == np.int32 and ours.num_documents == 50
    for d, doc in enumerate(docs):
        assert [s.tolist() for s in ours.document(d)] == [s.tolist() for s in doc]


def test_an_index_whose_pointers_lie_is_refused(tmp_path):
    """An .idx whose sequence pointer points at another document's tokens, or whose document indices run backwards
    or past its sequences, with a .bin of the right size: refused in one line when opened, not served."""
    w = IndexedDatasetWriter(tmp_path / "a", np.int32)
    for d in ([1, 2], [3], [4, 5, 6]):
        w.add_document(d)
    w.finalize()
    good = (tmp_path / "a.idx").read_bytes()
    seq_count = 3
    pointers_at = 34 + 4 * seq_count  # int64 pointers after the header and the int32 lengths
    docs_at = 34 + 12 * seq_count
    lying = {
        "a pointer at another document": good[:pointers_at + 8] + np.int64(0).tobytes() + good[pointers_at + 16:],
        "document indices backwards": good[:docs_at + 8] + np.int64(3).tobytes() + np.int64(1).tobytes()
        + good[docs_at + 24:],
        "document indices past the sequences": good[:docs_at + 24] + np.int64(9).tobytes() + good[docs_at + 32:],
    }
    for name, data in lying.items():
        assert len(data) == len(good), name
        (tmp_path / "a.idx").write_bytes(data)
        with pytest.raises(TextmillError, match="pointers|document indices"):
            IndexedDataset(tmp_path / "a")
    (tmp_path / "a.idx").write_bytes(good)
    assert [IndexedDataset(tmp_path / "a")[i].tolist() for i in range(3)] == [[1, 2], [3], [4, 5, 6]]
