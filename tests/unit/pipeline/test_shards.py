"""Shard files: kept, rejects and the manifest written last; accounting checked; unfinished shards refused."""

import pyarrow.parquet as pq
import pytest

from support.files import write_jsonl
from textmill.errors import TextmillError
from textmill.pipeline.documents import iter_documents
from textmill.pipeline.shards import DOC_SCHEMA, ShardOutput, list_shards, manifest_path, rejects_path


def doc(i):
    return {name: None for name in DOC_SCHEMA.names} | {"id": f"d{i}", "text": f"text {i}"}


def test_stage_writes_kept_rejects_and_manifest_last(tmp_path):
    out = tmp_path / "part-00000.parquet"
    with ShardOutput("clean", out, DOC_SCHEMA, [], {"p": 1}) as stage:
        stage.keep(doc(0))
        stage.reject(doc(1), "language=de")
        stage.reject(doc(2), "too_short")
        assert not out.exists() and not manifest_path(out).exists()
        m = stage.finish(3)
    assert m["counts"] == {"input": 3, "kept": 1, "rejected": 2, "output_rows": 1}
    assert m["reasons"] == {"language=de": 1, "too_short": 1}
    assert pq.read_table(out).column("id").to_pylist() == ["d0"]
    assert pq.read_table(rejects_path(out)).column("reason").to_pylist() == ["language=de", "too_short"]


def test_a_reason_the_list_does_not_have_is_refused_and_leaves_nothing(tmp_path):
    """textmill/pipeline/reasons.py is the one list of reject reasons (the docs' table is made from it): a stage
    rejecting for another reason fails, however the reason's detail reads."""
    with pytest.raises(ValueError, match="dedup rejects a record as 'status=404', a reason .* does not list"):
        with ShardOutput("dedup", tmp_path / "a.parquet", DOC_SCHEMA, [], {}) as stage:
            stage.reject(doc(1), "near_duplicate_of=d0")
            stage.reject(doc(2), "status=404")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    with ShardOutput("quality", tmp_path / "b.parquet", DOC_SCHEMA, [], {}) as stage:
        stage.reject(doc(1), "top_3gram_chars")
        with pytest.raises(ValueError, match="'top_gram_chars'"):
            stage.reject(doc(2), "top_gram_chars")


def test_accounting_mismatch_fails_and_leaves_nothing(tmp_path):
    out = tmp_path / "part-00000.parquet"
    with pytest.raises(AssertionError, match="kept 1 \\+ rejected 0 != input 2"):
        with ShardOutput("t", out, DOC_SCHEMA, [], {}) as stage:
            stage.keep(doc(0))
            stage.finish(2)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # (an empty .rejects folder may stay)


def test_exception_inside_stage_leaves_no_files(tmp_path):
    out = tmp_path / "a.parquet"
    with pytest.raises(RuntimeError):
        with ShardOutput("t", out, DOC_SCHEMA, [], {}) as stage:
            stage.keep(doc(0))
            raise RuntimeError("killed")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # (an empty .rejects folder may stay)


def test_a_reject_that_cannot_be_written_leaves_no_kept_list_under_its_name(tmp_path):
    """Issue 62: a reject row its columns could not hold failed as the rejects were flushed, after the kept JSON-lines
    list had been renamed into place: a part-written list without a manifest, which blacklist took as finished."""
    import pyarrow as pa

    out = tmp_path / "RS_2011-01.jsonl"
    schema = pa.schema([("url", pa.string()), ("score", pa.int64())])
    with pytest.raises(OverflowError):
        with ShardOutput("reddit-urls", out, schema, [], {}) as stage:
            stage.keep({"url": "http://a.example/", "score": 5})
            stage.reject({"url": "http://b.example/", "score": 10**30}, "low_score")
            stage.finish(2)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_split_pieces_count_once(tmp_path):
    with ShardOutput("t", tmp_path / "a.parquet", DOC_SCHEMA, [], {}) as stage:
        stage.keep_pieces([doc(0), doc(1), doc(2)])
        stage.keep(doc(3))
        m = stage.finish(2)
    assert m["counts"] == {"input": 2, "kept": 2, "rejected": 0, "output_rows": 4}


def test_list_shards_refuses_unfinished_shard(tmp_path):
    with ShardOutput("t", tmp_path / "a.parquet", DOC_SCHEMA, [], {}) as stage:
        stage.finish(0)
    (tmp_path / "b.parquet").write_bytes((tmp_path / "a.parquet").read_bytes())  # kept file, no manifest
    with pytest.raises(TextmillError, match="b.parquet have no whole manifest"):
        list_shards([tmp_path])
    with pytest.raises(TextmillError, match="input not found"):
        list_shards([tmp_path / "nope"])


def test_loose_json_bad_lines_become_reasoned_records(tmp_path):
    path = tmp_path / "docs.jsonl"
    write_jsonl(path, [{"text": "good one", "url": "http://example.com/a"}, {"title": "no text"}, {"text": 5}])
    with open(path, "ab") as f:
        f.write(b"{not json\n\n\xff\xfe{\"text\": 1}\n")
    got = list(iter_documents(path))
    assert [reason for _, reason in got] == [None, "missing_text", "missing_text", "invalid_json", "undecodable"]
    assert got[0][0]["id"] != "docs.jsonl:1" and got[1][0]["id"] == "docs.jsonl:2"


def test_a_record_over_the_size_limit_is_rejected_too_large_without_being_read_whole(tmp_path):
    import gzip
    import tracemalloc

    import pyarrow as pa
    import pyarrow.parquet as pq

    limit = 1000
    lines = [b'{"id": "fits", "text": "' + b"a" * (limit - 26) + b'"}',  # exactly the limit, kept
             b'{"id": "over", "text": "' + b"b" * (limit - 25) + b'"}',  # a byte more
             b'{"id": "huge", "text": "' + b"c " * 10_000_000 + b'"}',
             b'{"id": "after", "text": "still read"}']
    assert len(lines[0]) == limit and len(lines[1]) == limit + 1
    for name, opener in (("docs.jsonl", open), ("docs.jsonl.gz", gzip.open)):
        with opener(tmp_path / name, "wb") as f:
            f.write(b"\r\n".join(lines))  # Windows line ends do not count
        tracemalloc.start()
        got = list(iter_documents(tmp_path / name, max_bytes=limit))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert [(row["id"], reason) for row, reason in got] == [
            ("fits", None), (f"{name}:2", "too_large"), (f"{name}:3", "too_large"), ("after", None)]
        assert got[2][0]["text"].startswith('{"id": "huge"') and len(got[2][0]["text"]) == 200
        assert peak < 5_000_000  # the 20 MB line was never held whole (it is read past 1 MB at a time)
        assert [reason for _, reason in iter_documents(tmp_path / name)] == [None] * 4  # 0 takes any

    # Another tool's Parquet: a row whose text is over the limit in UTF-8 (500 characters of two bytes each).
    pq.write_table(pa.table({"id": ["small", "wide"], "text": ["é" * 500, "é" * 501]}), tmp_path / "theirs.parquet")
    got = list(iter_documents(tmp_path / "theirs.parquet", max_bytes=limit))
    assert [(row["id"], reason) for row, reason in got] == [("small", None), ("wide", "too_large")]
    assert got[1][0]["text"] == "é" * 200


def test_an_input_that_is_a_symlink_loop_or_a_fifo_says_what_it_is(tmp_path):
    """A URL list or a shard that is a symbolic link loop (it ended in a RuntimeError traceback) or a FIFO (it was
    "not found", though it exists): one error line naming what the input is."""
    import os

    from textmill.pipeline.blacklist import url_list_files

    (tmp_path / "loop.txt").symlink_to(tmp_path / "loop.txt")
    os.mkfifo(tmp_path / "fifo.txt")
    for read in (url_list_files, list_shards):
        with pytest.raises(TextmillError, match="symbolic link that leads nowhere"):
            read([tmp_path / "loop.txt"])
        with pytest.raises(TextmillError, match="not a regular file or folder"):
            read([tmp_path / "fifo.txt"])
