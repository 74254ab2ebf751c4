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
            one, three = (pq.read_table(tmp_path / run / folder / m["output"]) for run in ("one", "three"))
            assert one == three


def test_workers_start_where_pandas_is_not_installed(tmp_path):
    """`pip install textmill` brings no pandas (only the test extra's datasets does); pyarrow then does without it,
    and so must the workers, which import it before they fork where it is installed."""
    import subprocess
    import sys

    big = tmp_path / "export.jsonl"
    big.write_text("".join(json.dumps(d) + "\n" for d in records(20)))
    code = ("import sys; sys.modules['pandas'] = None  # as if not installed\n"
            "from textmill.cli import main\n"
            f"sys.exit(main(['dedup', {str(big)!r}, '-o', {str(tmp_path / 'out')!r}, '--workers', '2', "
            "'--documents-per-shard', '5']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert len(list((tmp_path / "out").glob("*.parquet"))) == 4
