"""Each task's records outside its output folder: its last failure (for `textmill status` and the report, until
it succeeds) and how long it ran and when it finished (for the run's record)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from textmill.io.files import read_json_record, write_json
from textmill.io.store import publish
from textmill.workflows.framework import RunTask

FAILURES = ".textmill/failures"
TIMES = ".textmill/times"

# When this process's run began (begin_run; the workers it forks inherit it): a task whose time record was written
# since ran in this run. (A cluster's machines each start their own run: on one, a task another machine finished
# before it started counts as an earlier run's.)
_RUN_BEGAN = [0.0]


def begin_run() -> None:
    _RUN_BEGAN[0] = time.time()


def record_file(task: RunTask, kind: str) -> Path:
    """Where a task's last failure (kind FAILURES) or run time (TIMES) is kept, outside its output folder: named
    by the task's class and its own parameters, not by the run file's path (part of Luigi's task id), so a work
    folder moved or copied elsewhere keeps its records. (Not by its key either: a task can fail before its key
    can be computed, when an input it names is missing.)"""
    own = "".join(f"-{name}={value}" for name, value in task.param_kwargs.items() if name != "config")
    return task.work / kind / f"{type(task).__name__}{own}.json"


def write_record(task: RunTask, kind: str, record: dict) -> None:
    """Write a failure or timing record; where the disk refuses (full, read-only), say so in one line: the
    record is a note for `textmill status` and the report, and the run's own error says what failed."""
    path = record_file(task, kind)
    try:
        write_json({"task": task.task_id, **record}, path)
        publish([path])
    except OSError as exc:
        print(f"textmill: could not write {path} ({exc.strerror or exc})", file=sys.stderr)


def read_record(task: RunTask, kind: str) -> dict | None:
    return read_json_record(record_file(task, kind), "ignored (it is rewritten when the task next runs)")


def failure_file(task: RunTask) -> Path:
    return record_file(task, FAILURES)


def task_seconds(task: RunTask) -> float:
    record = read_record(task, TIMES)
    return float(record.get("seconds", 0.0)) if record else 0.0


def stage_tasks(tasks: list) -> tuple[dict[str, float], dict[str, int]]:
    """The seconds of each step of a stage's tasks (one time record read per task), and how many of the tasks this
    run made, took from an earlier task's output made from the same input bytes (reuse.py), or found done by an
    earlier run."""
    from textmill.workflows.reuse import was_reused

    seconds, counts = {}, {"made": 0, "taken": 0, "earlier": 0}
    for task in tasks:
        record = read_record(task, TIMES) or {}
        seconds[task.step] = seconds.get(task.step, 0.0) + float(record.get("seconds", 0.0))
        if not in_this_run(record):
            counts["earlier"] += 1
        else:
            counts["taken" if task.reusable and was_reused(task.output().done) else "made"] += 1
    return seconds, counts


def in_this_run(time_record: dict) -> bool:
    return time_record.get("finished", -1.0) >= _RUN_BEGAN[0]


def as_of_this_run(task: RunTask, tasks: dict[str, int] | None) -> dict[str, int] | None:
    """The task counts a stage's record (`task`'s) holds, as this run sees them: an earlier run's record says what
    that run did; in this one, every task was done before."""
    if tasks is None or in_this_run(read_record(task, TIMES) or {}):
        return tasks
    return {"made": 0, "taken": 0, "earlier": sum(tasks.values())}
