"""--workers N (workflows/workers.py): N long-lived processes share a stage's tasks, one scheduling them and the others
assisting, and write what one worker writes."""

import json
import os

import luigi
import pyarrow.parquet as pq

from textmill.pipeline.stage_configs import DedupConfig, InputConfig
from textmill.workflows.commands import run_stage
from textmill.workflows.framework import RunTask
from unit.workflows.test_commands import records


def test_three_workers_share_the_tasks_and_write_what_one_writes(tmp_path):
    big = tmp_path / "export.jsonl"
    big.write_text("".join(json.dumps(d) + "\n" for d in records(90)))
    settings = {"dedup": DedupConfig(), "input": InputConfig(documents_per_shard=9)}
    ran = tmp_path / "ran-in"

    def note_process(task, seconds):  # inherited by the forked workers, run where each task ran
        with open(ran, "a") as f:
            f.write(f"{os.getpid()}\n")

    one = run_stage("dedup", [big], tmp_path / "one", settings, workers=1)
    RunTask.event_handler(luigi.Event.PROCESSING_TIME)(note_process)
    try:
        three = run_stage("dedup", [big], tmp_path / "three", settings, workers=3)
    finally:
        RunTask._event_callbacks[RunTask][luigi.Event.PROCESSING_TIME].discard(note_process)
    processes = ran.read_text().split()
    assert len(processes) > 40 and len(set(processes)) == 3 and str(os.getpid()) not in processes
    assert [m["output"] for m in three.manifests] == [m["output"] for m in one.manifests]
    for m in one.manifests:
        for folder in ("", ".rejects/"):
            assert pq.read_table(tmp_path / "one" / folder / m["output"]) == pq.read_table(tmp_path / "three" / folder / m["output"])
