"""`textmill shuffle`: shards sized by a target, a note on empty shards, reruns with fewer shards, and an output
folder that may not hold its input."""

import json

from support.cli import run_cli
from support.files import write_jsonl
from support.stages import shuffle_inputs, shuffle_shards
from textmill.pipeline.shards import list_shards


def test_the_command_sizes_shards_by_target_and_says_when_shards_are_empty(tmp_path):
    inputs = shuffle_inputs(tmp_path)
    size = sum(p.stat().st_size for p in inputs)
    r = run_cli("shuffle", *map(str, inputs), "-o", str(tmp_path / "sized"), "--target-shard-mb", str(size / 2**20 / 3))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "sized").glob(".manifests/*.json")) == [f"part-{b:05d}.json"
                                                                                   for b in range(3)]
    assert "empty" not in r.stderr
    # More shards than documents: the command says how many came out empty (the count itself is checked in
    # tests/unit/pipeline/test_shuffle.py; here, that the command prints it).
    few = write_jsonl(tmp_path / "few" / "docs.jsonl", [{"id": f"d{i}", "text": f"doc {i}"} for i in range(3)])
    r = run_cli("shuffle", str(few), "-o", str(tmp_path / "many"), "--num-shards", "8")
    empty = [m for m in (tmp_path / "many").glob(".manifests/*.json") if json.loads(m.read_text())["counts"]["input"] == 0]
    assert r.returncode == 0 and f"note: {len(empty)} of the 8 shuffled shards are empty (3 documents)" in r.stderr
    assert len(empty) >= 5


def test_a_rerun_with_fewer_shards_leaves_only_its_own_and_the_output_may_not_hold_an_input(tmp_path):
    inputs = shuffle_inputs(tmp_path)
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
