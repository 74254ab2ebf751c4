"""A corpus that grows in parts ([run] corpus_form = "parts"): day 1, day 2 with one more URL list, training on the
blend of the parts, and the same documents as the single form."""

import json
from pathlib import Path

import pyarrow.parquet as pq

from support.cli import run_cli
from support.files import TEST_DATA
from support.runs import make_run
from textmill.megatron.indexed import IndexedDataset
from textmill.workflows import MergeDataset
from textmill.workflows.runner import run_workflow
from textmill.workflows.shuffle_tasks import corpus_task


def parts_run(root: Path, site, files: int, train: str) -> Path:
    """The test run file over `files` URL lists, in the parts form, with GPT-2's vocabulary (which the form needs)."""
    config = make_run(root, site, files=files, train=train)
    text = config.read_text().replace("vocab_size = 600", f'vocab_file = "{TEST_DATA / "gpt2-vocab.json"}"\n'
                                      f'merge_file = "{TEST_DATA / "gpt2-merges.txt"}"')
    config.write_text(text.replace('urls = ["urls"]', 'urls = ["urls"]\ncorpus_form = "parts"'))
    return config


def documents(config: Path) -> set[tuple[str, str]]:
    """The finished documents of the run (id and text), whatever their order."""
    shards = corpus_task(str(config)).output().shards
    return {(row["id"], row["text"]) for shard in shards for row in pq.read_table(shard, columns=["id", "text"]).to_pylist()}


def token_files(blend: list) -> dict[str, bytes]:
    return {prefix: Path(f"{prefix}.bin").read_bytes() + Path(f"{prefix}.idx").read_bytes() for _, prefix in blend}


def test_a_grown_corpus_of_parts_keeps_the_earlier_parts_token_files_and_trains_on_every_part(tmp_path, site):
    config = parts_run(tmp_path, site, files=2, train="false")
    first = run_workflow(config)
    assert first.ok and first.record.corpus.parts == 1
    day1 = MergeDataset(str(config)).output().record()["blend"]
    day1_files = token_files(day1)

    parts_run(tmp_path, site, files=3, train="true")  # the third list arrives; this run trains
    second = run_workflow(config)
    assert second.ok, second.summary
    corpus = second.record.corpus
    day2 = MergeDataset(str(config)).output().record()["blend"]
    assert corpus.parts == 2 and corpus.tokens == sum(tokens for tokens, _ in day2)
    # The first part's token files are day 1's, byte for byte; its tokenization was taken, not done again.
    kept = {Path(prefix).name: data for prefix, data in token_files(day2).items()}
    assert all(kept[Path(prefix).name] == data for prefix, data in day1_files.items())
    assert corpus.tasks == {"made": len(day2) - len(day1), "taken": len(day1), "earlier": 0}, corpus.tasks
    parts = json.loads((tmp_path / "work" / ".textmill" / "parts.json").read_text())["parts"]
    assert [len(part) for part in parts] == [2, 1] and parts[1] == ["RS_2-00000"]
    # Cleanup ran for the new unit (and any whose documents dedup changed), not for the others.
    [clean] = [s for s in second.record.funnel if s.stage == "clean"]
    assert clean.tasks["made"] <= 1 + (3 - clean.tasks["taken"]) and clean.tasks["taken"] >= 1
    [shuffle] = [s for s in second.record.funnel if s.stage == "shuffle"]
    assert shuffle.tasks["taken"] >= len(day1)  # the first part's gathers at least

    # The model trained on every part, each weighed by its tokens (Megatron's --data-path W1 P1 W2 P2 ...).
    [log] = (tmp_path / "work" / "10-train").glob("*/train.log")
    expected = " ".join(f"{tokens} {prefix}" for tokens, prefix in day2)
    assert f"--data-path {expected}" in log.read_text()
    assert second.record.train.iterations == 20
    # One pair of token files when a tool wants one: the parts' folder merged (the parts one after the other).
    merged = run_cli("merge-datasets", "--input", corpus.dataset, "--output-prefix", str(tmp_path / "one"))
    assert merged.returncode == 0, merged.stderr
    assert IndexedDataset(tmp_path / "one").num_documents == corpus.documents

    # What holds for the parts form: the documents of the single form (dedup and decontamination judged every new
    # document against the whole corpus), in another order.
    in_parts = documents(config)
    config.write_text(config.read_text().replace('corpus_form = "parts"', 'corpus_form = "single"')
                      .replace("enabled = true", "enabled = false"))
    single = run_workflow(config)
    assert single.ok and single.record.corpus.parts is None
    assert documents(config) == in_parts and len(in_parts) == corpus.documents
    assert single.record.corpus.tokens == corpus.tokens
    [dedup] = [s for s in single.record.funnel if s.stage == "dedup"]
    assert dedup.tasks["made"] == dedup.tasks["taken"] == 0 < dedup.tasks["earlier"]  # the same deduplicated shards
