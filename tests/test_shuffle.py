import hashlib
import json

import pyarrow.parquet as pq
import pytest

from textmill.errors import TextmillError
from textmill.pipeline.config import ShuffleConfig
from textmill.pipeline.shards import list_shards
from textmill.pipeline.shuffle import gather_bucket, scatter_record, scatter_shard
from textmill.workflows.commands import run_stage

from conftest import run_cli, write_jsonl


def shuffle_shards(inputs, output, num_shards, seed):
    """`textmill shuffle` as its tasks run it; the output shards' manifests."""
    return run_stage("shuffle", inputs, output, {"shuffle": ShuffleConfig(num_shards=num_shards, seed=seed)}).manifests


def make_inputs(tmp_path):
    for s in range(3):
        write_jsonl(tmp_path / "in" / f"s{s}.jsonl", [{"id": f"{s}-{i}", "text": f"doc {s} {i}"} for i in range(200)])
    with open(tmp_path / "in" / "s1.jsonl", "a") as f:
        f.write("{broken\n")
    return sorted((tmp_path / "in").iterdir())


def ids(path):
    return pq.read_table(path).column("id").to_pylist()


def test_shuffle_is_a_seeded_permutation(tmp_path):
    inputs = make_inputs(tmp_path)
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


def test_scatter_and_gather_steps_in_any_order_give_the_same_shards(tmp_path):
    inputs = make_inputs(tmp_path)
    shuffle_shards(inputs, tmp_path / "whole", 3, seed=5)
    scattered = [tmp_path / "scatter" / f"{i}.parquet" for i in range(len(inputs))]
    (tmp_path / "scatter").mkdir()
    for i in reversed(range(len(inputs))):  # as independent workers might run them
        record = scatter_shard(inputs[i], scattered[i], 3, seed=5)
        assert record["rows"] == (201 if i == 1 else 200)
        assert pq.ParquetFile(scattered[i]).num_row_groups == len(record["row_groups"]) <= 3
    for b in (2, 0, 1):
        gather_bucket(scattered, b, tmp_path / "steps" / f"part-{b:05d}.parquet", 3, seed=5)
    whole = [*(tmp_path / "whole").glob("*.parquet"), *(tmp_path / "whole").glob(".rejects/*.parquet")]
    for name in sorted(str(p.relative_to(tmp_path / "whole")) for p in whole):
        if name.endswith(".parquet"):
            assert (tmp_path / "steps" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_a_gather_without_its_scatter_record_is_one_error(tmp_path):
    inputs = make_inputs(tmp_path)
    (tmp_path / "scatter").mkdir()
    scatter_shard(inputs[0], tmp_path / "scatter" / "0.parquet", 2, seed=1)
    scatter_record(tmp_path / "scatter" / "0.parquet").unlink()  # as a worker killed before its record
    with pytest.raises(TextmillError, match="no whole scatter record"):
        gather_bucket([tmp_path / "scatter" / "0.parquet"], 0, tmp_path / "out" / "part-00000.parquet", 2, seed=1)
    assert not (tmp_path / "out" / ".manifests" / "part-00000.json").exists()


def test_the_command_sizes_shards_by_target_and_says_when_shards_are_empty(tmp_path):
    inputs = make_inputs(tmp_path)
    size = sum(p.stat().st_size for p in inputs)
    r = run_cli("shuffle", *map(str, inputs), "-o", str(tmp_path / "sized"), "--target-shard-mb", str(size / 2**20 / 3))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "sized").glob(".manifests/*.json")) == [f"part-{b:05d}.json"
                                                                                   for b in range(3)]
    assert "empty" not in r.stderr
    r = run_cli("shuffle", *map(str, inputs), "-o", str(tmp_path / "many"), "--num-shards", "700")
    empty = [m for m in (tmp_path / "many").glob(".manifests/*.json") if json.loads(m.read_text())["counts"]["input"] == 0]
    assert r.returncode == 0 and f"note: {len(empty)} of the 700 shuffled shards are empty (601 documents)" in r.stderr
    assert len(empty) > 100


def test_a_rerun_with_fewer_shards_leaves_only_its_own_and_the_output_may_not_hold_an_input(tmp_path):
    inputs = make_inputs(tmp_path)
    shuffle_shards(inputs, tmp_path / "out", 4, seed=9)
    r = run_cli("shuffle", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--num-shards", "2", "--seed", "9")
    assert r.returncode == 0, r.stderr
    assert "removed 6 file(s) an earlier run wrote that this one does not (part-00002.parquet" in r.stderr
    assert list_shards([tmp_path / "out"]) == [tmp_path / "out" / f"part-{b:05d}.parquet" for b in range(2)]
    assert sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").glob("**/part-*")) == sorted(
        f"{folder}part-{b:05d}.{kind}" for b in range(2) for folder, kind in (("", "parquet"), (".manifests/", "json"),
                                                                              (".rejects/", "parquet")))
    shuffle_shards(inputs, tmp_path / "two", 2, seed=9)
    for b in range(2):
        name = f"part-{b:05d}.parquet"
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()

    r = run_cli("shuffle", str(tmp_path / "in"), "-o", str(tmp_path / "in"))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"textmill: error: input {inputs[0]} lies in the output folder {tmp_path / 'in'}; give another output folder"]
