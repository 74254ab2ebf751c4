"""Running the graph: Luigi set up for unattended runs, failures recorded for `textmill status`."""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

import luigi

from textmill.workflows.tasks import Corpus, RunTask

FAILURES = ".textmill/failures"


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


def failure_file(task: RunTask) -> Path:
    return task.work / FAILURES / f"{task.task_id}.json"


@RunTask.event_handler(luigi.Event.FAILURE)
def record_failure(task: RunTask, exception: BaseException) -> None:
    path = failure_file(task)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"task": task.task_id, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                "error": f"{type(exception).__name__}: {exception}",
                                "traceback": traceback.format_exception(exception)[-6:]}, indent=1))


@RunTask.event_handler(luigi.Event.SUCCESS)
def clear_failure(task: RunTask) -> None:
    failure_file(task).unlink(missing_ok=True)


def run_workflow(config: Path, workers: int = 1, scheduler_url: str | None = None) -> tuple[bool, str]:
    """Build the run of `config`; (succeeded, Luigi's summary)."""
    configure_luigi()
    kwargs = {"scheduler_url": scheduler_url} if scheduler_url else {"local_scheduler": True}
    target = Corpus(str(Path(config).resolve()))
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

    visit(Corpus(str(Path(config).resolve())))
    return list(seen.values())
