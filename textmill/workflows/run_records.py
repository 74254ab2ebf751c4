"""The record of a whole run (runs/<name>/run.json), its report and the results table, and the state of every
task for `textmill status`."""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import replace
from pathlib import Path

import luigi

from textmill.errors import TextmillError
from textmill.io.files import atomic_path, write_json
from textmill.io.store import listed_folders, publish
from textmill.report.record import CorpusTokens, Evaluation, Export, RunRecord, StageCounts, Training
from textmill.run_file import RunConfig
from textmill.workflows.framework import RunTask, graph
from textmill.workflows.memos import forget, run_config
from textmill.workflows.model_tasks import EndToEnd
from textmill.workflows.records import FAILURES, as_of_this_run, read_record, task_seconds
from textmill.workflows.source_tasks import source_tasks, sources_finished
from textmill.workflows.stages import StageRecord, read, run_stages
from textmill.workflows.token_tasks import MergeDataset

RUNS = "runs"


def run_targets(config: Path) -> list[luigi.Task]:
    """What a run makes: everything (EndToEnd), and each corpus stage's record for the run's record; until the
    URL lists a run's Reddit dumps give are all there, those lists (the rest of the graph is built from them)."""
    config = str(Path(config).resolve())
    if not sources_finished(config):
        return source_tasks(config)
    return [EndToEnd(config), *(StageRecord(config, stage.name) for stage in run_stages(run_config(config)))]


def run_graph(config: Path) -> list[luigi.Task]:
    """Every task of the run's graph, once each, requirements first."""
    return graph(run_targets(config))


def task_states(config: Path) -> list[dict]:
    """Every task of the run's graph, requirements first: its name (a shard task by its shard's name, as
    `ScrapeShard(RS_2019-01)`), state (done, failed or pending) and, for a failed one, the last failure
    recorded; the run file and the inputs read as they are now."""
    forget()
    with listed_folders(run_config(str(config)).run.work_dir):  # each stage's folder of the store listed once
        return states_of(str(config))


def states_of(config: str) -> list[dict]:
    """task_states, of the graph as this process knows it."""
    states = []
    for task in run_graph(config):
        state, reason = ("done" if task.complete() else "pending"), None
        record = read_record(task, FAILURES) if state == "pending" and isinstance(task, RunTask) else None
        if record:
            state, reason = "failed", f"{record.get('error', 'unknown error')} ({record.get('time', '?')})"
        states.append({"task": task.shown() if hasattr(task, "shown") else f"{task.task_family}()",
                       "state": state, "reason": reason})
    return states


def add_corpus(record: RunRecord, settings: RunConfig) -> None:
    """The corpus part of a run record, as far as the run got: each finished stage's record (stages.StageRecord:
    its counts, reasons, time, examples and own figures, one file a stage), and the merged token files."""
    config = str(settings.path)
    for stage in run_stages(settings):
        stage_record = StageRecord(config, stage.name)
        done = stage_record.output()
        if not done.exists():
            break
        found = read(done.done)
        counts = StageCounts.from_dict(found.pop("funnel"))
        record.funnel.append(replace(counts, tasks=as_of_this_run(stage_record, counts.tasks)))
        record.samples[stage.name] = found.pop("samples")
        record.seconds_per_stage.update(found.pop("seconds_per_stage"))
        for figure, value in found.items():  # the stage's own figures (stages.Stage.part)
            setattr(record, figure, value)
    merged = MergeDataset(config).output()
    if merged.exists():
        made = read(merged.done)
        record.corpus = replace(CorpusTokens.from_dict(made), tasks=as_of_this_run(MergeDataset(config), made.get("tasks")))
        record.seconds_per_stage.update(made.get("seconds_per_stage", {}))


def run_record(settings: RunConfig, name: str, started_at: str, seconds: float | None, status: str) -> RunRecord:
    """What the run of `settings` (its run file, read once when the run began) made, for run.json, the results table
    and report.html (each folder of the store listed once for it: store.listed_folders)."""
    with listed_folders(settings.run.work_dir):
        return read_run_record(settings, name, started_at, seconds, status)


def read_run_record(settings: RunConfig, name: str, started_at: str, seconds: float | None, status: str) -> RunRecord:
    from textmill.workflows.model_tasks import EvaluateLambada, ExportHF, TrainGPT

    config = str(settings.path)
    record = RunRecord(run=name, config=config, started=started_at, seconds=None if seconds is None else round(seconds, 1),
                       status=status)
    if status == "failed":
        record.failed = [f"{s['task']}: {s['reason']}" for s in states_of(config) if s["state"] == "failed"]
    lists_written = sources_finished(config)
    add_corpus(record, settings)
    if not lists_written:  # the graph after the URL lists is not known yet
        return record
    train = TrainGPT(config)
    if settings.train.enabled and train.complete():
        record.train = Training.from_dict(read(train.output().done))
        evaluate, export = EvaluateLambada(config), ExportHF(config)
        if settings.evaluate.lambada and evaluate.complete():
            record.evaluate = [Evaluation(name=Path(r["valid_data"]).stem, file=r["valid_data"], accuracy=r["accuracy"],
                                          correct=r["correct"], total=r["total"], perplexity=r["perplexity"])
                               for r in read(evaluate.output().done)["results"]]
        if settings.export.hf and export.complete():
            record.export = Export.from_dict(read(export.output().done))
    for task in (TrainGPT(config), EvaluateLambada(config), ExportHF(config)):  # the corpus's: in its stage records
        if task.complete():
            record.seconds_per_stage[task.step] = task_seconds(task)
    record.seconds_per_stage = {k: round(v, 2) for k, v in record.seconds_per_stage.items()}
    return record


def start_run_record(settings: RunConfig, record: RunRecord) -> Path:
    """The run's folder (runs/<name>[-k]) with its record as it starts ("running", with its process), so that a
    run killed before its end is still recorded (record_killed_runs); record_run writes its end there."""
    runs = settings.run.work_dir / RUNS
    runs.mkdir(parents=True, exist_ok=True)
    folder, k = runs / record.run, 1
    while True:  # several workers on one central scheduler may start in the same second
        try:
            folder.mkdir()
            break
        except FileExistsError:
            k += 1
            folder = runs / f"{record.run}-{k}"
    record.run = folder.name
    write_json(record.to_dict(), folder / "run.json")
    publish([folder / "run.json"])
    return folder


def record_killed_runs(settings: RunConfig) -> list[str]:
    """Runs of this machine recorded as running whose process is gone (killed, or its machine restarted):
    recorded as killed, with what had been finished by now, and their reports written. Their names."""
    from textmill.report.results import read_runs

    killed = []
    for record in read_runs(settings.run.work_dir / RUNS):
        host, _, pid = (record.process or "").rpartition(":")
        if record.status == "running" and host == socket.gethostname() and not process_alive(int(pid)):
            record_run(settings, run_record(settings, record.run, record.started, None, "killed"), newest=False)
            killed.append(record.run)
    return killed


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def record_run(settings: RunConfig, record: RunRecord, newest: bool = True) -> Path:
    """Write the run's record into its folder (runs/<name>: start_run_record), its report.html, the results
    table and (`newest`) WORK/report.html."""
    from textmill.report.page import write_report
    from textmill.report.results import read_runs, write_results

    runs = settings.run.work_dir / RUNS
    folder = runs / record.run
    write_json(record.to_dict(), folder / "run.json")
    records = read_runs(runs)
    history = [r for r in records if r.run <= record.run][-settings.run.results_runs:]
    write_report(record, history, folder / "report.html")
    results = write_results(settings.run.work_dir, records, settings.run.results_runs)
    written = [folder / "run.json", folder / "report.html", results, results.with_suffix(".tsv")]
    if newest:
        with atomic_path(settings.run.work_dir / "report.html") as tmp:
            shutil.copyfile(folder / "report.html", tmp)
        written.append(settings.run.work_dir / "report.html")
    publish(written)
    return folder


def export_stage(config: Path, stage: str | None, output: Path) -> dict:
    """The kept shards of a finished corpus stage of the run (default: its last, the corpus) gathered in one
    folder, `output`, which `datasets.load_dataset("parquet", data_dir=...)` or a teammate reads as it is: each
    unit's shard sits in a folder keyed by its own inputs, so no one folder of WORK holds a stage. Hard links where
    the work folder shares the disk (no copy, and the view stays when WORK is cleaned), else copies; written whole,
    then renamed into place."""
    import pyarrow.parquet as pq

    from textmill.io.files import atomic_folder, exported_folder
    from textmill.io.store import fetch
    from textmill.workflows.stages import STAGE_NAMES, shard_files

    settings = run_config(str(config))
    output = Path(os.path.abspath(output))
    for held in run_paths(settings):
        if output == held or held in output.parents or output in held.parents:
            raise TextmillError(f"cannot export to {output}: the run keeps {held} there; give a folder outside the "
                                "run's work folder, inputs and run file")
    exported_folder(output, "an export of a corpus stage")
    names = [s.name for s in run_stages(settings)]
    stage = stage or names[-1]
    if stage not in names:
        raise TextmillError(f"the run of {config} has no {stage} stage (its stages: {', '.join(names)})")
    tasks = STAGE_NAMES[stage].shards(str(config))
    with listed_folders(settings.run.work_dir):
        left = sum(not task.complete() for task in tasks)
    if left:
        raise TextmillError(f"the run of {config} has not finished its {stage} stage ({left} of {len(tasks)} task(s) "
                            f"left): textmill run {config} first")
    shards = [fetch(shard) for shard in shard_files(tasks)]
    linked = 0
    with atomic_folder(output, "an export of a corpus stage") as folder:
        for shard in shards:
            try:
                os.link(shard, folder / shard.name)
                linked += 1
            except OSError:  # another disk, or a file system without hard links
                shutil.copyfile(shard, folder / shard.name)
    documents = sum(pq.read_metadata(shard).num_rows for shard in shards if shard.suffix == ".parquet")
    return {"stage": stage, "shards": len(shards), "documents": documents, "output": str(output), "linked": linked}


def run_paths(settings) -> list[Path]:
    """The local files and folders a run keeps or reads: its run file, work folder and inputs (absolute)."""
    from textmill.io.store import url_of

    paths = [settings.path, settings.run.work_dir, *settings.run.urls, *settings.run.reddit_dumps,
             *settings.run.warcs, *settings.evaluate.lambada]
    return [Path(os.path.abspath(p)) for p in paths if url_of(Path(p)) is None]
