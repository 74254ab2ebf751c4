"""A corpus stage on its own: `textmill blacklist | scrape | extract | dedup | clean | quality | shuffle | decontaminate IN... -o
OUT` runs that stage's tasks of the run's graph (textmill.workflows) on a local Luigi scheduler, so
the command and `textmill run` share one driver and write the same files. The stage's shards, rejects,
manifests and records go straight into OUT; the steps before them (MinHash signatures, band keys,
scattered shards, URL checks) into OUT/.textmill. Run again with the same inputs and settings, it skips
every finished step; with other settings, it rewrites what they change."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

import luigi

from textmill.errors import RunFailed, TextmillError
from textmill.io.progress import progress_interval
from textmill.io.files import read_json, read_json_record, write_json
from textmill.io.store import files_under, remove, shown, url_of
from textmill.pipeline.shards import manifest_path
from textmill.run_file import TABLES
from textmill.settings import Settings, resolve, to_table
from textmill.workflows.batches import batched, tasks_per_stage
from textmill.workflows.framework import RunTask, graph, input_files, warm
from textmill.workflows.memos import forget, run_config
from textmill.workflows.records import FAILURES
from textmill.workflows.runner import Schedulers, configure_luigi, upgrade_work_layout, work_lock
from textmill.workflows.stages import STAGE_NAMES, shard_files
from textmill.workflows.workers import build

COMMAND_BUSY = "another textmill command is working in {work} ({holder}); wait for it to finish"


class StageResult(NamedTuple):
    manifests: list[dict]  # the output shards' manifests, in shard order
    record: dict | None  # the stage's own record, where it has one: dedup's clusters, the shuffle's, decontamination's


def run_stage(stage: str, inputs: list[str], output: str | Path, settings: dict[str, Settings],
              workers: int = 1, output_format: str = "parquet") -> StageResult:
    """Run the corpus stage `stage` alone on `inputs` (files or folders; local or URLs) into `output` with
    `settings` (its table's settings, and the tables it also reads: "tokenize" for clean's exact token
    counts; the shuffle's seed is the run's seed) by `workers` Luigi workers; its kept shards left as
    `output_format` (place_kept)."""
    forget()
    progress_interval()  # a bad TEXTMILL_PROGRESS_S is one error line before any task
    folder = resolve(str(output), Path.cwd())
    if output_format != "parquet" and url_of(folder) is not None:
        raise TextmillError(f"--output-format {output_format} writes a local folder, not {output}; write Parquet "
                            "there, or write locally and copy")
    folder.mkdir(parents=True, exist_ok=True)  # a folder it cannot write is the disk error it is
    with work_lock(folder, COMMAND_BUSY):
        upgrade_work_layout(folder)
        config = str(command_file(stage, inputs, output, settings, folder))
        given = input_files(run_config(config))  # a missing or unreadable input: one error line before anything runs
        inside = [p for p in given if p.resolve().parent == folder.resolve()]
        if inside:
            raise TextmillError(f"input {inside[0]} lies in the output folder {shown(folder)}; give another output folder")
        targets = stage_targets(config)
        configure_luigi()
        started = time.time()
        if workers > 1:
            warm(targets)
        build(batched(targets, tasks_per_stage(config, workers, None)), workers, None, Schedulers(), log_level="CRITICAL")
        if not all(t.complete() for t in targets):
            raise why_unfinished(stage, folder, started)
        remove_stale(stage, folder, targets)
        result = stage_result(stage, config)
        if stage not in ("reddit-urls", "blacklist"):  # their shards are URL lists, not documents
            place_kept(folder, kept_shards(stage, config), output_format)
        return result


@RunTask.event_handler(luigi.Event.PROCESSING_TIME)
def show_progress(task: RunTask, seconds: float) -> None:
    """A stage command's progress: a line per finished step."""
    command = task.settings.command
    if command:
        print(f"textmill {command}: {task.shown()} done in {seconds:.1f}s", file=sys.stderr, flush=True)


def remove_stale(stage: str, folder: Path, targets: list[luigi.Task]) -> None:
    """Remove from the output folder what an earlier command wrote there that this one does not (shards
    beyond a smaller shard count, those of inputs no longer given), by the key records that list them,
    so the folder holds this command's output and nothing else."""
    ours = [t.output() for t in graph(targets) if isinstance(t, RunTask) and t.writes_command_output()]
    current = {t.key_record for t in ours}
    kept = {name for t in ours for name in (read_json_record(t.key_record, "rewritten") or {}).get("files", [])}
    stale = []
    for path in files_under(folder / ".textmill" / "keys"):
        if path not in current:
            record = read_json_record(path, "removed") or {}
            for name in record.get("files", []):
                if name not in kept:
                    remove(folder / name)
                    stale.append(name)
            remove(path)
    if stale:
        print(f"textmill {stage}: removed {len(stale)} file(s) an earlier run wrote that this one does not "
              f"({', '.join(stale[:3])}{', ...' if len(stale) > 3 else ''})", file=sys.stderr)


def kept_shards(stage: str, config: str) -> list[Path]:
    """The stage's kept shards, as its tasks write them (Parquet)."""
    return shard_files(STAGE_NAMES[stage].shards(config))


def place_kept(folder: Path, shards: list[Path], output_format: str) -> None:
    """Leave the kept shards in `output_format`. "jsonl.gz": each becomes NAME.jsonl.gz, what datatrove's
    JSONL writer writes (textmill's columns in each document's metadata), and its Parquet shard moves
    aside into .parquet/, where a later command that asks for Parquet takes it back, running nothing
    again. Either way, what an earlier command left in the other format for shards it no longer has goes."""
    from textmill.io.files import write_json_lines_gz
    from textmill.pipeline.documents import datatrove_record
    from textmill.pipeline.shards import read_rows, shard_stem, sidecar_path

    for shard in shards:
        aside, as_jsonl = sidecar_path(shard, "parquet"), shard.with_name(f"{shard_stem(shard)}.jsonl.gz")
        if output_format == "jsonl.gz":
            if shard.exists() or not as_jsonl.exists():  # written (again) by this command, or asked for anew
                source = shard if shard.exists() else aside
                write_json_lines_gz((datatrove_record(row) for row in read_rows(source, kind="document")), as_jsonl)
            if shard.exists():
                aside.parent.mkdir(exist_ok=True)
                os.replace(shard, aside)
        else:
            if aside.exists() and not shard.exists():
                os.replace(aside, shard)
            aside.unlink(missing_ok=True)
            as_jsonl.unlink(missing_ok=True)
    stems = {shard_stem(s) for s in shards}
    for left in [*folder.glob("*.jsonl.gz"), *folder.glob(".parquet/*.parquet")]:
        if shard_stem(left) not in stems:
            left.unlink()


def absolute(item: str | Path) -> str:
    """An input or output as the command file holds it: a URL as given, a path made absolute."""
    return str(item) if "://" in str(item) else str(Path(item).expanduser().absolute())


def command_file(stage: str, inputs: list[str], output: str | Path, settings: dict[str, Settings],
                 folder: Path) -> Path:
    """OUT/.textmill/command.json: the tables of a run file for this stage alone (config.load_config)."""
    tables: dict = {"command": stage, "train": {"enabled": False},
                    "run": {"work_dir": absolute(output), "urls": [absolute(i) for i in inputs]}}
    for name, values in settings.items():
        if name == "shuffle":  # the workflow's shuffle seed is [run] seed
            tables["run"]["seed"] = values.seed
        tables[name] = to_table(values, skip=tuple(TABLES[name].workflow_sets))
    path = folder / ".textmill" / "command.json"
    if read_json_record(path, "it is written again") != tables:  # rewritten only when it changes, as a run file
        write_json(tables, path)
    return path


def stage_targets(config: str) -> list[luigi.Task]:
    """The tasks whose completion is the stage's: each output shard's, and the stage's own record."""
    return STAGE_NAMES[run_config(config).command].targets(config)


def stage_result(stage: str, config: str) -> StageResult:
    """The output shards' manifests and the stage's record, once its targets are finished (stage_targets)."""
    summary = STAGE_NAMES[stage].summary
    record = read_json(summary(config).output().done) if summary else None
    return StageResult([read_json(manifest_path(p)) for p in kept_shards(stage, config)], record)


def why_unfinished(stage: str, folder: Path, since: float) -> TextmillError:
    """The error a stage command ends with when a task failed: the first failure this command recorded
    (deterministic ones, bad input or settings, as they are; others with where their traceback is)."""
    records = sorted((p for p in (folder / FAILURES).glob("*.json") if p.stat().st_mtime >= since - 1),
                     key=lambda p: p.stat().st_mtime)
    for path in records:
        record = read_json_record(path, "ignored")
        if record:
            if record.get("deterministic"):
                return TextmillError(record["error"])
            return RunFailed(f"{record['error']} (traceback: {path})")
    return RunFailed(f"textmill {stage} did not finish, and no task recorded why; run it again")
