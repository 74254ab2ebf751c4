"""Running the graph: Luigi set up for unattended runs, failures recorded for `textmill status`."""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

import luigi

from textmill.workflows.tasks import EndToEnd, RunTask

FAILURES = ".textmill/failures"
TIMES = ".textmill/times"


def configure_luigi() -> None:
    """Settings for unattended runs, unless the user's luigi.cfg says otherwise: a task is checked again
    before it runs (another worker may have done it); a worker stays while tasks it waits for run
    elsewhere (several workers on one central scheduler all finish together) and retries a failed task
    (at most RunTask.retry_count times); a failed run exits non-zero."""
    config = luigi.configuration.get_config()
    defaults = {("worker", "check_complete_on_run"): "true", ("worker", "keep_alive"): "true",
                ("core", "autoload_range"): "false", ("retcode", "task_failed"): "1",
                ("retcode", "scheduling_error"): "2", ("retcode", "unhandled_exception"): "3",
                ("retcode", "missing_data"): "4", ("scheduler", "retry_delay"): "1"}
    for (section, option), value in defaults.items():
        if not config.has_option(section, option):
            config.set(section, option, value)


def record_file(task: RunTask, kind: str) -> Path:
    """Where a task's last failure (kind FAILURES) or run time (TIMES) is kept, outside its output folder."""
    return task.work / kind / f"{task.task_id}.json"


def write_record(task: RunTask, kind: str, record: dict) -> None:
    path = record_file(task, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"task": task.task_id, **record}, indent=1))


def failure_file(task: RunTask) -> Path:
    return record_file(task, FAILURES)


@RunTask.event_handler(luigi.Event.FAILURE)
def record_failure(task: RunTask, exception: BaseException) -> None:
    write_record(task, FAILURES, {"time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                  "error": f"{type(exception).__name__}: {exception}",
                                  "traceback": traceback.format_exception(exception)[-6:]})


@RunTask.event_handler(luigi.Event.SUCCESS)
def clear_failure(task: RunTask) -> None:
    failure_file(task).unlink(missing_ok=True)


@RunTask.event_handler(luigi.Event.PROCESSING_TIME)
def record_time(task: RunTask, seconds: float) -> None:
    """How long the task's run() took, for the funnel."""
    write_record(task, TIMES, {"seconds": seconds})


def task_seconds(task: RunTask) -> float:
    path = record_file(task, TIMES)
    return json.loads(path.read_text())["seconds"] if path.exists() else 0.0


def run_workflow(config: Path, workers: int = 1, scheduler_url: str | None = None) -> tuple[bool, str]:
    """Build the run of `config`; (succeeded, Luigi's summary)."""
    configure_luigi()
    kwargs = {"scheduler_url": scheduler_url} if scheduler_url else {"local_scheduler": True}
    target = EndToEnd(str(Path(config).resolve()))
    result = luigi.build([target], workers=workers, detailed_summary=True, log_level="WARNING", **kwargs)
    # Done is what the files say: with a central scheduler, other workers may have run any part of it.
    return target.complete(), result.summary_text


def task_states(config: Path) -> list[dict]:
    """Every task of the run's graph, requirements first: its name, state (done, failed or pending) and,
    for a failed one, the last failure recorded."""
    seen: dict[str, dict] = {}

    def visit(task: luigi.Task) -> None:
        if task.task_id in seen:
            return
        seen[task.task_id] = {}  # placeholder: a task reached twice is listed once
        for required in luigi.task.flatten(task.requires()):
            visit(required)
        state, reason = ("done" if task.complete() else "pending"), None
        if state == "pending" and isinstance(task, RunTask) and failure_file(task).exists():
            record = json.loads(failure_file(task).read_text())
            state, reason = "failed", f"{record['error']} ({record['time']})"
        params = ", ".join(f"{k}={v}" for k, v in task.param_kwargs.items() if k != "config")
        seen[task.task_id] = {"task": f"{task.task_family}({params})", "state": state, "reason": reason}

    visit(EndToEnd(str(Path(config).resolve())))
    return list(seen.values())


def funnel_lines(config: Path) -> list[str]:
    """One line per corpus stage of a finished run (records in, kept, rejected by reason), from the
    manifests its tasks wrote; then the token count."""
    from textmill.cli import decontaminate_line, dedup_line, summary_line
    from textmill.pipeline.shards import manifest_path
    from textmill.workflows import tasks as t

    config = str(Path(config).resolve())
    cfg = t.run_config(config)
    n = t.num_url_files(cfg)

    def read(path: Path) -> dict:
        return json.loads(path.read_text())

    # (stage, its manifests, its folder, the seconds its tasks took)
    stages = []
    for name, task in (("blacklist", t.BlacklistShard), ("scrape", t.ScrapeShard), ("dedup", t.DedupShard),
                       ("clean", t.CleanShard)):
        shard_tasks = [task(config, i) for i in range(n)]
        stages.append((name, [read(s.done_file()) for s in shard_tasks], shard_tasks[-1].folder(),
                       sum(task_seconds(s) for s in shard_tasks)))
    global_tasks = [("shuffle", t.Shuffle(config))]
    if cfg.decontaminate.eval_files:
        global_tasks.append(("decontaminate", t.Decontaminate(config)))
    for name, task in global_tasks:
        stages.append((name, [read(manifest_path(p)) for p in task.shards()], task.folder(), task_seconds(task)))
    lines = []
    for name, manifests, folder, seconds in stages:
        if name == "dedup":
            clusters = t.DedupClusters(config)
            seconds += task_seconds(clusters) + sum(task_seconds(t.SignatureShard(config, i)) for i in range(n))
        lines.append(summary_line(name, manifests, folder, seconds))
        if name == "dedup":
            lines.append(dedup_line(read(t.DedupClusters(config).done_file())))
        if name == "decontaminate":
            lines.append(decontaminate_line(read(t.Decontaminate(config).done_file()), cfg.decontaminate))
    merged = read(t.MergeDataset(config).done_file())
    lines.append(f"tokenize: {merged['documents']:,} documents, {merged['tokens']:,} tokens -> {merged['dataset']}.bin/.idx")
    return lines
