"""The shuffle's scatter and gather steps: a seeded permutation, the order textmill 0.1 gave, steps in any order,
a missing scatter record, and the note on empty shards."""

import hashlib

import pyarrow.parquet as pq
import pytest

from support.files import write_jsonl
from support.stages import shuffle_inputs, shuffle_shards
from textmill.errors import TextmillError
from textmill.pipeline.shards import list_shards
from textmill.pipeline import shuffle
from textmill.pipeline.shuffle import empty_shards_note, gather_bucket, scatter_record, scatter_shard


def ids(path):
    return pq.read_table(path).column("id").to_pylist()


def test_shuffle_is_a_seeded_permutation(tmp_path):
    inputs = shuffle_inputs(tmp_path)
    manifests = shuffle_shards(inputs, tmp_path / "a", 4, seed=9)
    shuffle_shards(inputs, tmp_path / "b", 4, seed=9)
    shuffle_shards(inputs, tmp_path / "c", 4, seed=10)
    out = [ids(tmp_path / "a" / f"part-{b:05d}.parquet") for b in range(4)]
    flat = [i for shard in out for i in shard]
    expected = [f"{s}-{i}" for s in range(3) for i in range(200)]
    assert sorted(flat) == sorted(expected) and flat != expected
    assert all(100 <= len(shard) <= 200 for shard in out)
    for b in range(4):
        name = f"part-{b:05d}.parquet"
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert [ids(tmp_path / "c" / f"part-{b:05d}.parquet") for b in range(4)] != out
    assert sum(m["counts"]["input"] for m in manifests) == 601
    assert sum(m["counts"]["rejected"] for m in manifests) == 1  # the broken JSON line, with its reason
    assert list_shards([tmp_path / "a"]) == [tmp_path / "a" / f"part-{b:05d}.parquet" for b in range(4)]


def test_the_order_is_the_one_textmill_0_1_gave(tmp_path):
    # sha256 of each output shard's ids, one a line, as the single-process shuffle of textmill 0.1 wrote them
    # (its files were also byte-identical to the scatter/gather steps' on these inputs).
    for s in range(3):
        write_jsonl(tmp_path / "in" / f"s{s}.jsonl", [{"id": f"{s}-{i}", "text": f"doc {s} {i}"} for i in range(200)])
    shuffle_shards(sorted((tmp_path / "in").iterdir()), tmp_path / "out", 4, seed=9)
    pinned = ["ea59a1269bb2adf1", "dc143bf9cbb5ec7b", "da31e449409dea3f", "16dcc088b6c20141"]
    for b, digest in enumerate(pinned):
        order = "\n".join(ids(tmp_path / "out" / f"part-{b:05d}.parquet"))
        assert hashlib.sha256(order.encode()).hexdigest()[:16] == digest, b


@pytest.mark.parametrize("batch,held", [(7, 1), (4096, 64 << 20)])
def test_scatter_and_gather_steps_in_any_order_and_batches_of_any_size_give_the_same_shards(tmp_path, monkeypatch,
                                                                                            batch, held):
    """A scatter reads a batch of documents at a time and writes its buckets when it holds `held` bytes:
    batches of 7 written at once give the shards one batch of all gives; a unit held whole is one row group
    per bucket."""
    inputs = shuffle_inputs(tmp_path)
    shuffle_shards(inputs, tmp_path / "whole", 3, seed=5)
    monkeypatch.setattr(shuffle, "SCATTER_ROWS", batch)
    monkeypatch.setattr(shuffle, "SCATTER_BUFFER_BYTES", held)
    scattered = [tmp_path / "scatter" / f"{i}.parquet" for i in range(len(inputs))]
    (tmp_path / "scatter").mkdir()
    for i in reversed(range(len(inputs))):  # as independent workers might run them
        record = scatter_shard(inputs[i], scattered[i], 3, seed=5)
        assert record["rows"] == (201 if i == 1 else 200)
        groups = sum(len(g) for g in record["row_groups"].values())
        assert pq.ParquetFile(scattered[i]).num_row_groups == groups <= 3 * -(-record["rows"] // batch)
        assert all(len(g) == 1 for g in record["row_groups"].values()) or held == 1
    for b in (2, 0, 1):
        gather_bucket(scattered, b, tmp_path / "steps" / f"part-{b:05d}.parquet", 3, seed=5)
    whole = [*(tmp_path / "whole").glob("*.parquet"), *(tmp_path / "whole").glob(".rejects/*.parquet")]
    for name in sorted(str(p.relative_to(tmp_path / "whole")) for p in whole):
        if name.endswith(".parquet"):
            assert (tmp_path / "steps" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_a_gather_without_its_scatter_record_is_one_error(tmp_path):
    inputs = shuffle_inputs(tmp_path)
    (tmp_path / "scatter").mkdir()
    scatter_shard(inputs[0], tmp_path / "scatter" / "0.parquet", 2, seed=1)
    scatter_record(tmp_path / "scatter" / "0.parquet").unlink()  # as a worker killed before its record
    with pytest.raises(TextmillError, match="no whole scatter record"):
        gather_bucket([tmp_path / "scatter" / "0.parquet"], 0, tmp_path / "out" / "part-00000.parquet", 2, seed=1)
    assert not (tmp_path / "out" / ".manifests" / "part-00000.json").exists()


def test_the_empty_shards_note_counts_the_gathered_shards_that_got_no_document(tmp_path):
    """More shards than documents: the real scatter and gathers, and the note the command prints."""
    write_jsonl(tmp_path / "in" / "docs.jsonl", [{"id": f"d{i}", "text": f"doc {i}"} for i in range(20)])
    scattered = tmp_path / "scatter" / "docs.parquet"
    scattered.parent.mkdir()
    scatter_shard(tmp_path / "in" / "docs.jsonl", scattered, 40, seed=3)
    manifests = [gather_bucket([scattered], b, tmp_path / "out" / f"part-{b:05d}.parquet", 40, seed=3) for b in range(40)]
    empty = sum(m["counts"]["input"] == 0 for m in manifests)
    assert empty >= 20 and sum(m["counts"]["input"] for m in manifests) == 20
    assert empty_shards_note(manifests) == (f"note: {empty} of the 40 shuffled shards are empty (20 documents); ask "
                                            "for fewer shards, or none (num_shards 0) to size them by target_shard_mb")
    assert empty_shards_note([m for m in manifests if m["counts"]["input"]]) is None
