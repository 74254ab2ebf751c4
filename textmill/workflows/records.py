"""Each task's records outside its output folder: its last failure (for `textmill status` and the report, until
it succeeds) and how long it ran (for the run's record)."""

from __future__ import annotations

import sys
from pathlib import Path

from textmill.io.files import read_json_record, write_json
from textmill.io.store import publish
from textmill.workflows.framework import RunTask

FAILURES = ".textmill/failures"
TIMES = ".textmill/times"


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
