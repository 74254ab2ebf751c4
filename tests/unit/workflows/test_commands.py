"""A stage command given one big document file cuts it into units of work, and writes what it writes for the
same documents given as files of a unit each: the same kept and rejected documents, with the same ids (a
record without one is named by its file and line, as in the file it came from)."""

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from textmill.pipeline.shards import list_shards
from textmill.pipeline.stage_configs import DedupConfig, InputConfig
from textmill.workflows.commands import run_stage

WORDS = "the ship sailor boat sea wind storm harbor rope sail deck captain crew island map gold tide".split()


def records(count: int) -> list[dict]:
    """Documents without ids (named by file and line), every ninth a near copy of an earlier one."""
    rng = random.Random(3)
    made: list[dict] = []
    for i in range(count):
        if i % 9 == 4:
            words = made[i - 3]["text"].split()
            words[7] = "changed"
            made.append({"text": " ".join(words)})
        else:
            made.append({"text": " ".join(rng.choice(WORDS) for _ in range(120))})
    return made


def rows(folder, column: str) -> list:
    return [v for shard in list_shards([folder]) for v in pq.read_table(shard).column(column).to_pylist()]


def rejects(folder) -> list[tuple]:
    return sorted((r["id"], r["reason"]) for p in (folder / ".rejects").glob("*.parquet") for r in pq.read_table(p).to_pylist())


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_one_big_file_is_cut_into_units_and_gives_what_one_unit_gives(tmp_path, kind):
    docs = records(60)
    big = tmp_path / f"export.{kind}"
    if kind == "jsonl":
        lines = [json.dumps(d) for d in docs]
        lines[20] = '{"text": "cut short'  # a bad line: rejected, named by its line in the export
        big.write_text("\n".join(lines) + "\n")
    else:
        pq.write_table(pa.Table.from_pylist(docs), big, row_group_size=7)
    whole = run_stage("dedup", [big], tmp_path / "whole", {"dedup": DedupConfig(),
                                                            "input": InputConfig(documents_per_shard=1000)})
    cut = run_stage("dedup", [big], tmp_path / "cut", {"dedup": DedupConfig(), "input": InputConfig(documents_per_shard=13)})
    assert [m["output"] for m in whole.manifests] == ["export.parquet"]
    assert [m["output"] for m in cut.manifests] == [f"export-{n:05d}.parquet" for n in range(5)]
    assert all(m["counts"]["input"] <= 13 for m in cut.manifests)
    assert rows(tmp_path / "cut", "id") == rows(tmp_path / "whole", "id")
    assert rows(tmp_path / "cut", "text") == rows(tmp_path / "whole", "text")
    assert rejects(tmp_path / "cut") == rejects(tmp_path / "whole") and len(rejects(tmp_path / "whole")) >= 6
    assert rows(tmp_path / "whole", "id")[0] == f"export.{kind}:1"
    if kind == "jsonl":
        assert ("export.jsonl:21", "invalid_json") in rejects(tmp_path / "cut")


def test_a_stage_prints_progress_lines_for_its_tasks_without_a_terminal(tmp_path, monkeypatch, capsys):
    """The tasks of every stage (run by batches) say how far they are: `textmill run` and the stage commands
    are never silent for long where no terminal is attached."""
    from support.files import write_jsonl
    from textmill.pipeline.stage_configs import InputConfig
    from textmill.workflows.commands import run_stage

    monkeypatch.setenv("TEXTMILL_PROGRESS_S", "0")
    write_jsonl(tmp_path / "d.jsonl", [{"id": str(i), "text": f"document number {i} " * 20} for i in range(30)])
    run_stage("dedup", [str(tmp_path / "d.jsonl")], tmp_path / "out", {"input": InputConfig(documents_per_shard=10)})
    lines = capsys.readouterr().err.splitlines()
    for unit in range(3):  # three units, a batch each
        assert f"3-minhash task {unit}: 1 task of 1 task (100%)" in "\n".join(lines), lines
    assert any(line.startswith("3-dedup tasks 0-3: 4 task of 4 task (100%)") and line.endswith(" done")
               for line in lines), lines
