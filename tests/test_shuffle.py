import pyarrow.parquet as pq

from textmill.pipeline.shuffle import shuffle_shards

from conftest import write_jsonl


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
    assert not (tmp_path / "a" / ".shuffle-scatter").exists()
