"""Running the graph: Luigi set up for unattended runs (a worker that does not retry what would fail again),
each task's failure and time recorded (records.py) as it runs, the work folder's lock, and the whole run,
recorded when it ends as a dated folder with its report and a line in the results table."""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NamedTuple

import luigi
import luigi.rpc
import luigi.scheduler
import luigi.worker

from textmill.errors import Interrupted, RunFailed, TextmillError, is_disk_error
from textmill.io.progress import progress_interval
from textmill.io.store import listed_folders, remove, url_of
from textmill.pipeline.shards import upgrade_layout
from textmill.report.record import RunRecord
from textmill.run_file import RunConfig
from textmill.workflows.batches import Batch, batched, tasks_per_stage
from textmill.workflows.framework import RunTask, graph, warm, work_folders
from textmill.workflows.memos import forget, run_config
from textmill.workflows.records import FAILURES, TIMES, begin_run, failure_file, read_record, write_record
from textmill.workflows.run_records import (
    RUNS,
    record_killed_runs,
    record_run,
    run_record,
    run_targets,
    start_run_record,
)
from textmill.workflows.source_tasks import source_tasks
from textmill.workflows.workers import HELD_LOCKS, build


STALL_SECONDS = 30  # a worker on a central scheduler that got no work while nothing ran anywhere: stalled


class FailFastWorker(luigi.worker.Worker):
    """A Luigi worker that schedules each task once, and, when a task fails deterministically (bad input or
    settings: its failure record says so), marks it disabled right after reporting the failure, so the
    scheduler does not retry what would fail the same way. The scheduler judges a failure by the retry
    policy it got when the task was scheduled, before anyone knew the failure, hence this second report. A
    task disabled by a worker becomes pending again when the next run schedules it, on luigid too."""

    scheduling = True  # until run(): the targets of the build are being scheduled

    def _add(self, task, is_complete):
        """Luigi walks each target's requirements anew, so the targets of one build (a stage command's shards,
        the run's damaged tasks) scheduled what they share once per target: an add_task each time, an HTTP
        request on a central scheduler. Here, while the targets are scheduled, a task already scheduled is not
        scheduled again; once tasks run, what they add (requirements found missing, or yielded) is, as in Luigi."""
        if not (self.scheduling and task.task_id in self._scheduled_tasks):
            yield from super()._add(task, is_complete)

    def run(self):
        """Once the graph is scheduled: its tasks that a central scheduler holds disabled are enabled again (a
        rerun tries what is unfinished, as with the scheduler in this process; enable_again), then run."""
        self.scheduling = False
        self.enable_again(())
        return super().run()

    keep_alive_while = None  # an assistant's: whether the worker that scheduled the graph is still there

    def _keep_alive(self, get_work_response) -> bool:
        """An assistant (workers.py) stays while the worker it assists does; Luigi's stay for ever. A worker
        with nothing left to wait for stays too if tasks of its graph were disabled by failures it did not see
        (enable_again); one that waits stays only while the wait can end (not_stalled)."""
        if self._assistant and self.keep_alive_while is not None:
            return self.keep_alive_while()
        if not super()._keep_alive(get_work_response):
            return self.enable_again(self.tried_here)
        return self.not_stalled(get_work_response)

    targets: tuple = ()  # what the run asked for (add)
    stalled_since: float | None = None
    rescheduled = 0

    def not_stalled(self, get_work_response) -> bool:
        """On a central scheduler: whether waiting can still end. luigid drops a lost worker from the tasks it
        was running, and a task this worker had scheduled while that worker ran it was left pending with no
        worker to hand it to: the run waited for ever (seen in the kill loop, benchmarks/kill_loop_s3.py). Once
        nothing has run anywhere for STALL_SECONDS, the targets are scheduled again, which names this worker
        for every unfinished task; at most twice, then the run ends "not finished"."""
        if not isinstance(self._scheduler, luigi.rpc.RemoteScheduler) or get_work_response.running_tasks:
            self.stalled_since = None
            return True
        now = time.monotonic()
        self.stalled_since = self.stalled_since or now
        if now - self.stalled_since < STALL_SECONDS:
            return True
        if self.rescheduled == 2:
            return False
        self.rescheduled += 1
        self.stalled_since = None
        for target in self.targets:
            self.add(target)
        return True

    tried_here: set[str] = frozenset()
    enabled: set[str] = frozenset()  # the tasks this worker has enabled again

    def _run_task(self, task_id):
        self.tried_here = self.tried_here | {task_id}
        return super()._run_task(task_id)

    def enable_again(self, excluded) -> bool:
        """On a central scheduler: the tasks of this worker's graph that luigid holds disabled for failing too
        often, but not those in `excluded`, enabled again (each once in this worker's life); whether there
        were any. luigid counts a lost worker's task as failed and remembers failures across runs, so two runs
        killed while a task worked disable it for a day, and Luigi lets no worker undo that by scheduling the
        task again: every later run ended "not finished" at once, or on being left with nothing to wait for.
        A task that failed twice in this run's own hands stays disabled: the run fails, and the next retries."""
        if self._assistant or not isinstance(self._scheduler, luigi.rpc.RemoteScheduler):
            return False
        disabled = set(self._scheduler.task_list(luigi.scheduler.DISABLED, "") or ())
        again = [task_id for task_id in disabled & set(self._scheduled_tasks) - set(excluded) - set(self.enabled)]
        for task_id in again:
            self._scheduler.re_enable_task(task_id)
        self.enabled = self.enabled | set(again)
        return bool(again)

    def add(self, *args, **kwargs):
        """Scheduling asks every task of the graph whether it is done: in a store, each folder is listed once
        for the walk, not asked about a task at a time (store.listed_folders)."""
        task = args[0] if args else kwargs["task"]
        if task not in self.targets:
            self.targets = (*self.targets, task)
        with listed_folders(*work_folders([task])):
            return super().add(*args, **kwargs)

    def _add_task(self, *args, **kwargs):
        super()._add_task(*args, **kwargs)
        task = self._scheduled_tasks.get(kwargs.get("task_id"))
        if kwargs.get("status") == luigi.scheduler.FAILED and failed_deterministically(task):
            super()._add_task(*args, **{**kwargs, "status": luigi.scheduler.DISABLED})


def failed_deterministically(task: luigi.Task | None) -> bool:
    """Whether a retry cannot cure a failed task, or a failed batch: the failure records of its tasks (each one
    the batch tried this time, since a success clears its record) all say so."""
    tasks = task.tasks if isinstance(task, Batch) else [task]
    with listed_folders(*work_folders(tasks)):
        records = [read_record(t, FAILURES) for t in tasks if isinstance(t, RunTask)]
    failed = [record for record in records if record]
    return bool(failed) and all(record.get("deterministic") for record in failed)


class Schedulers:
    """The factory luigi.build takes, with FailFastWorker as the worker (as Luigi's own, otherwise)."""

    def create_local_scheduler(self):
        return luigi.scheduler.Scheduler(prune_on_get_work=True, record_task_history=False)

    def create_remote_scheduler(self, url):
        return luigi.rpc.RemoteScheduler(url)

    def create_worker(self, scheduler, worker_processes, assistant=False):
        return FailFastWorker(scheduler=scheduler, worker_processes=worker_processes, assistant=assistant)


def configure_luigi() -> None:
    """Settings for unattended runs, unless the user's luigi.cfg says otherwise: a task is checked again
    before it runs (another worker may have done it); a worker stays while tasks it waits for run
    elsewhere (several workers on one central scheduler all finish together) and retries a failed task
    (RunTask.retry_count tries) unless its failure is deterministic (FailFastWorker); a central scheduler
    that is away is asked again for a minute; a failed run exits non-zero."""
    config = luigi.configuration.get_config()
    defaults = {("worker", "check_complete_on_run"): "true", ("worker", "keep_alive"): "true",
                ("core", "autoload_range"): "false", ("retcode", "task_failed"): "1",
                ("retcode", "scheduling_error"): "2", ("retcode", "unhandled_exception"): "3",
                ("retcode", "missing_data"): "4", ("scheduler", "retry_delay"): "1",
                # A central scheduler that is away (restarting, a network blip): asked again every 5 s for a
                # minute, where Luigi asks 3 times 30 s apart and a worker waits half a minute after it is back.
                ("core", "rpc_retry_attempts"): "12", ("core", "rpc_retry_wait"): "5"}
    for (section, option), value in defaults.items():
        if not config.has_option(section, option):
            config.set(section, option, value)
    # Luigi reads the rpc-retry options itself, but its [core] config class does not declare them, so every
    # task would warn that they are "not consumed".
    warnings.filterwarnings("ignore", message="The configuration contains the parameter 'rpc_retry_",
                            category=luigi.parameter.UnconsumedParameterWarning)
    interface = logging.getLogger("luigi-interface")
    if not any(isinstance(f, OneLineForKnownErrors) for f in interface.filters):
        interface.addFilter(OneLineForKnownErrors())


def failure_cause(exception: BaseException) -> str:
    """The line that says what failed: a TextmillError's own message, else the exception's type and message."""
    if isinstance(exception, TextmillError):
        return str(exception)
    return f"{type(exception).__name__}: {exception}"


@RunTask.event_handler(luigi.Event.FAILURE)
def record_failure(task: RunTask, exception: BaseException) -> None:
    write_record(task, FAILURES, {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "error": failure_cause(exception),
                                  "deterministic": isinstance(exception, TextmillError)
                                  and not isinstance(exception, RunFailed),
                                  "traceback": traceback.format_exception(exception)[-6:]})


class OneLineForKnownErrors(logging.Filter):
    """Luigi logs a failed task with its traceback; for a TextmillError (bad input or settings) or a disk
    that is full or read-only, the message is the whole story, so the log gets that one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[0] is None:  # Luigi's retry warning outside an exception
            record.exc_info = None  # would print "NoneType: None" under it
        if record.exc_info and (isinstance(record.exc_info[1], TextmillError) or is_disk_error(record.exc_info[1])):
            record.msg, record.args = f"{record.getMessage()}: {record.exc_info[1]}", ()
            record.exc_info = record.exc_text = None
        return True


@RunTask.event_handler(luigi.Event.SUCCESS)
def clear_failure(task: RunTask) -> None:
    remove(failure_file(task))


@RunTask.event_handler(luigi.Event.PROCESSING_TIME)
def record_time(task: RunTask, seconds: float) -> None:
    """How long the task's run() took, for the funnel."""
    write_record(task, TIMES, {"seconds": seconds, "finished": time.time()})


class RunResult(NamedTuple):
    ok: bool  # every task of the run is done
    summary: str  # Luigi's summary of what this process did
    record: RunRecord  # the run's record (runs/<name>/run.json)
    folder: Path  # runs/<name>: run.json and report.html


RUN_BUSY = ("another `textmill run` is working in {work} ({holder}); wait for it to finish, or run several workers "
            "through a central scheduler (--scheduler-url)")


@contextmanager
def work_lock(work: Path, busy: str = RUN_BUSY) -> Iterator[None]:
    """Hold WORK/.textmill/run.lock while a run without a central scheduler (or a stage command) works in
    WORK: a second one refuses at once, in one line (`busy`), rather than sharing scrape journals and
    temporary files. The kernel drops the lock with the process (its forked workers hold no copy), so a killed
    run leaves nothing to clean."""
    path = work / ".textmill" / "run.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path, "a+", encoding="utf-8")
    except OSError as exc:
        raise TextmillError(f"{work}: cannot write there ({exc.strerror or exc}); give [run] work_dir a folder "
                            "this user can write") from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise TextmillError(busy.format(work=work, holder=holder)) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        lock.flush()
        HELD_LOCKS.add(lock.fileno())  # a process forked while it is held closes its copy (workers.py)
        try:
            yield
        finally:
            HELD_LOCKS.discard(lock.fileno())


def upgrade_work_layout(work: Path) -> None:
    """Move the files of WORK's stage folders written before textmill 0.2 into this layout (a local WORK,
    under its lock: renames no other process sees half done), so their tasks stay complete."""
    if url_of(work) is not None:
        return
    folders = [work, *work.glob("*/*"), *work.glob(".textmill/*/*")]
    moved = sum(upgrade_layout(folder) for folder in folders if folder.is_dir())
    if moved:
        print(f"textmill: moved {moved} file(s) in {work} to where this version keeps them (rejects, manifests "
              "and records in dot-folders beside the kept shards)", file=sys.stderr)


def run_workflow(config: Path, workers: int = 1, scheduler_url: str | None = None) -> RunResult:
    """Build the run of `config`, then record it as a dated run: work/runs/<date_time>/run.json and
    report.html, work/report.html (the newest), and the results table of the last runs. Without a central
    scheduler the run holds WORK's lock (work_lock) throughout."""
    forget()
    settings = run_config(str(Path(config).resolve()))  # read once here, and handed down
    progress_interval()  # a bad TEXTMILL_PROGRESS_S is one error line before any task
    if scheduler_url:
        return build_and_record(settings, workers, scheduler_url)
    with work_lock(settings.run.work_dir):
        upgrade_work_layout(settings.run.work_dir)
        return build_and_record(settings, workers, None)


def build_and_record(settings: RunConfig, workers: int, scheduler_url: str | None) -> RunResult:
    """The run, recorded as it starts, at its end, and when Ctrl-C ends it; a run of this machine killed
    before (SIGKILL, a lost machine) is recorded as killed first."""
    configure_luigi()
    config = settings.path
    for killed in record_killed_runs(settings):
        print(f"textmill run: the run of {killed} was killed before its end; recorded so in "
              f"{settings.run.work_dir / RUNS / killed}", file=sys.stderr)
    name, started_at, started = time.strftime("%Y-%m-%d_%H%M%S"), time.strftime("%Y-%m-%dT%H:%M:%S"), time.perf_counter()
    begin_run()
    folder = start_run_record(settings, RunRecord(run=name, config=str(config), started=started_at, seconds=0.0,
                                                status="running", process=f"{socket.gethostname()}:{os.getpid()}"))
    try:
        ok, summary = build_run(config, workers, scheduler_url)
    except KeyboardInterrupt:
        record_run(settings, run_record(settings, folder.name, started_at, time.perf_counter() - started, "interrupted"))
        raise Interrupted(f"finished shards are kept, unfinished ones will be redone; recorded in {folder}") from None
    record = run_record(settings, folder.name, started_at, time.perf_counter() - started, "done" if ok else "failed")
    return RunResult(ok, summary, record, record_run(settings, record))


def build_run(config: Path, workers: int, scheduler_url: str | None) -> tuple[bool, str]:
    """Every task of the run that is not finished: whether all are now, and Luigi's summary."""
    return build_graphs([str(config)], lambda: run_targets(config), workers, scheduler_url)


def build_graphs(configs: list[str], targets_of, workers: int, scheduler_url: str | None) -> tuple[bool, str]:
    """Every unfinished task of `targets_of()`, the targets of the graphs of `configs` (a run's, or an ablation's
    variants', which share what they have in common: variant_tasks.py), once the files each graph starts from are
    there: whether all are finished now, and Luigi's summary."""
    per_stage = tasks_per_stage(configs[0], workers, scheduler_url)
    sources = [task for config in configs for task in source_tasks(config)]
    if sources and not all(task.complete() for task in sources):  # the graph after them is known once they are
        build(batched(sources, per_stage), workers, scheduler_url, Schedulers(), log_level="WARNING")
        forget()
    targets = targets_of()
    # A task whose done file is there but damaged runs again even when what follows it is complete (Luigi
    # would not look at it): its record is rebuilt rather than missing from every later report.
    with listed_folders(run_config(configs[0]).run.work_dir):
        damaged = [task for task in graph(targets) if isinstance(task, RunTask) and task.output().done.exists()
                   and not task.complete()]
    if workers > 1:
        warm(targets)
    summary = build(batched([*targets, *damaged], per_stage), workers, scheduler_url, Schedulers(), log_level="WARNING")
    # Done is what the files say: with a central scheduler, other workers may have run any part of it.
    return all(target.complete() for target in targets), summary
