"""Running the graph: Luigi set up for unattended runs, failures recorded for `textmill status`, and each
run recorded as a dated folder with its report and a line in the results table."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NamedTuple

import luigi
import luigi.rpc
import luigi.scheduler
import luigi.worker

from textmill.errors import RunFailed, TextmillError, is_disk_error
from textmill.io.files import atomic_path, read_json_record, write_json
from textmill.io.store import fetch, listed_folders, publish, remove, url_of
from textmill.pipeline.shards import manifest_path, upgrade_layout
from textmill.workflows.framework import RunTask, graph, warm, work_folders
from textmill.workflows.memos import forget, run_config
from textmill.workflows.model_tasks import EndToEnd
from textmill.workflows.workers import HELD_LOCKS, build

FAILURES = ".textmill/failures"
TIMES = ".textmill/times"
RUNS = "runs"


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
        self.scheduling = False
        return super().run()

    keep_alive_while = None  # an assistant's: whether the worker that scheduled the graph is still there

    def _keep_alive(self, get_work_response) -> bool:
        """An assistant (workers.py) stays while the worker it assists does; Luigi's stay for ever."""
        if self._assistant and self.keep_alive_while is not None:
            return self.keep_alive_while()
        return super()._keep_alive(get_work_response)

    def add(self, *args, **kwargs):
        """Scheduling asks every task of the graph whether it is done: in a store, each folder is listed once
        for the walk, not asked about a task at a time (store.listed_folders)."""
        with listed_folders(*work_folders([args[0] if args else kwargs["task"]])):
            return super().add(*args, **kwargs)

    def _add_task(self, *args, **kwargs):
        super()._add_task(*args, **kwargs)
        task = self._scheduled_tasks.get(kwargs.get("task_id"))
        if kwargs.get("status") == luigi.scheduler.FAILED and isinstance(task, RunTask):
            record = read_record(task, FAILURES)
            if record and record.get("deterministic"):
                super()._add_task(*args, **{**kwargs, "status": luigi.scheduler.DISABLED})


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
    (RunTask.retry_count tries) unless its failure is deterministic (FailFastWorker); a failed run exits
    non-zero."""
    config = luigi.configuration.get_config()
    defaults = {("worker", "check_complete_on_run"): "true", ("worker", "keep_alive"): "true",
                ("core", "autoload_range"): "false", ("retcode", "task_failed"): "1",
                ("retcode", "scheduling_error"): "2", ("retcode", "unhandled_exception"): "3",
                ("retcode", "missing_data"): "4", ("scheduler", "retry_delay"): "1"}
    for (section, option), value in defaults.items():
        if not config.has_option(section, option):
            config.set(section, option, value)
    interface = logging.getLogger("luigi-interface")
    if not any(isinstance(f, OneLineForKnownErrors) for f in interface.filters):
        interface.addFilter(OneLineForKnownErrors())


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
    write_record(task, TIMES, {"seconds": seconds})


def task_seconds(task: RunTask) -> float:
    record = read_record(task, TIMES)
    return float(record.get("seconds", 0.0)) if record else 0.0


class RunResult(NamedTuple):
    ok: bool  # every task of the run is done
    summary: str  # Luigi's summary of what this process did
    record: dict  # the run's record (runs/<name>/run.json)
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
    config = Path(config).resolve()
    forget()
    if scheduler_url:
        return build_and_record(config, workers, scheduler_url)
    work = run_config(str(config)).run.work_dir
    with work_lock(work):
        upgrade_work_layout(work)
        return build_and_record(config, workers, None)


def build_and_record(config: Path, workers: int, scheduler_url: str | None) -> RunResult:
    configure_luigi()
    name, started_at, started = time.strftime("%Y-%m-%d_%H%M%S"), time.strftime("%Y-%m-%dT%H:%M:%S"), time.perf_counter()
    target = EndToEnd(str(config))
    # A task whose done file is there but damaged runs again even when what follows it is complete (Luigi
    # would not look at it): its record is rebuilt rather than missing from every later report.
    with listed_folders(run_config(str(config)).run.work_dir):
        damaged = [task for task in run_graph(config) if isinstance(task, RunTask) and task.output().done.exists()
                   and not task.complete()]
    if workers > 1:
        warm([target])
    summary = build([target, *damaged], workers, scheduler_url, Schedulers(), log_level="WARNING")
    # Done is what the files say: with a central scheduler, other workers may have run any part of it.
    ok = target.complete()
    record = run_record(config, name, started_at, time.perf_counter() - started, ok)
    return RunResult(ok, summary, record, record_run(config, record))


def run_graph(config: Path) -> list[luigi.Task]:
    """Every task of the run's graph, once each, requirements first."""
    return graph([EndToEnd(str(Path(config).resolve()))])


def task_states(config: Path) -> list[dict]:
    """Every task of the run's graph, requirements first: its name (a shard task by its shard's name, as
    `ScrapeShard(RS_2019-01)`), state (done, failed or pending) and, for a failed one, the last failure
    recorded."""
    forget()
    states = []
    with listed_folders(run_config(str(config)).run.work_dir):  # each stage's folder of the store listed once
        for task in run_graph(config):
            state, reason = ("done" if task.complete() else "pending"), None
            record = read_record(task, FAILURES) if state == "pending" and isinstance(task, RunTask) else None
            if record:
                state, reason = "failed", f"{record.get('error', 'unknown error')} ({record.get('time', '?')})"
            states.append({"task": task.shown() if hasattr(task, "shown") else f"{task.task_family}()",
                           "state": state, "reason": reason})
    return states


def read(path: Path) -> dict:
    """A done file or manifest of a task found complete (so whole), or a run record."""
    return read_json_record(path, "ignored") or {}


def corpus_record(config: str) -> dict:
    """The corpus part of a run record, as far as the run got: per stage the records in, kept and
    rejected by reason (from the manifests its tasks wrote), the dedup clusters, decontamination, and the
    merged token files."""
    from textmill.pipeline.decontaminate import TOUCHED_LISTED
    from textmill.report.lines import stage_summary
    from textmill.report.page import SCANNED_SHARDS, corpus_histograms, duplicate_pairs, stage_examples
    from textmill.workflows import corpus_tasks as c
    from textmill.workflows import shuffle_tasks as s
    from textmill.workflows.framework import ShardTask, num_shards
    from textmill.workflows.token_tasks import MergeDataset

    settings = run_config(config)
    n = num_shards(settings)
    stages = [(name, [cls(config, i) for i in range(n)]) for name, cls in
              (("blacklist", c.BlacklistShard), ("scrape", c.ScrapeShard), ("dedup", c.DedupShard), ("clean", c.CleanShard))]
    if settings.quality.preset != "none":
        stages.append(("quality", [c.QualityShard(config, i) for i in range(n)]))
    stages.append(("shuffle", [s.Shuffle(config)]))
    if settings.decontaminate.eval_files:
        stages.append(("decontaminate", [s.Decontaminate(config)]))
    part: dict = {"funnel": []}
    for name, tasks in stages:
        if not all(x.complete() for x in tasks):
            return part
        if isinstance(tasks[0], ShardTask):  # its done file is its shard's manifest
            shards = [x.output().shard for x in tasks]
            manifests = [read(x.output().done) for x in tasks]
        else:
            shards = tasks[0].output().shards
            manifests = [read(manifest_path(p)) for p in shards]
        examined = local_copies(shards[:SCANNED_SHARDS])  # the shards the report's examples come from
        timed = list(tasks)
        if name == "blacklist":
            timed += [c.BlacklistCheck(config, i) for i in range(n)]
            timed += [c.BlacklistDuplicates(config, p) for p in range(settings.blacklist.duplicate_partitions)]
        if name == "shuffle":
            timed += [s.ShuffleScatter(config, i) for i in range(n)]
            timed += [s.ShufflePlan(config), *s.Shuffle(config).requires_later()]
        if name == "dedup":
            clusters = c.DedupClusters(config)
            timed += [clusters, *luigi.task.flatten(clusters.requires())]  # the band merges, signatures, band keys
            part["dedup"] = read(clusters.output().done)
            found = read(clusters.output().files["clusters"])
            part["duplicate_pairs"] = duplicate_pairs(found.get("duplicates", {}), set(found.get("exact", [])),
                                                      examined)
        if name == "decontaminate":
            select = s.DecontaminateSelect(config)
            timed += [select, *select.requires_later(), *tasks[0].requires_later()]
            part["decontaminate"] = {**read(tasks[0].output().done), "key_threshold": settings.decontaminate.key_threshold,
                                     "touched": [d for m in manifests for d in m.get("touched", [])][:TOUCHED_LISTED]}
        summary = stage_summary(name, manifests, tasks[0].folder(), sum(task_seconds(x) for x in timed))
        part["funnel"].append(summary)
        part.setdefault("samples", {})[name] = stage_examples(examined, list(summary["reasons"]))
    merged = MergeDataset(config).output()
    if merged.exists():
        part["corpus"] = {k: v for k, v in read(merged.done).items() if k in ("dataset", "documents", "tokens")}
        corpus = s.corpus_task(config).output()
        part["corpus"]["histograms"] = earlier_histograms(settings.run.work_dir, part["corpus"]["dataset"]) or \
            corpus_histograms([str(corpus.local_shard(j)) for j in range(len(corpus.shards))],
                              str(merged.local_dataset()))
    return part


def local_copies(shards: list[Path]) -> list[Path]:
    """The shards, and their rejects where they have them, current on this machine (for the report's examples)."""
    from textmill.pipeline.shards import rejects_path

    for shard in shards:
        fetch(shard)
        try:
            fetch(rejects_path(shard))
        except FileNotFoundError:
            pass  # a stage that rejects nothing (the shuffle) writes none
    return shards


def earlier_histograms(work: Path, dataset: str) -> dict | None:
    """The document histograms of the newest earlier run of the same token files (a run that finds the
    corpus done does not read it again)."""
    from textmill.report.results import read_runs

    for record in reversed(read_runs(work / RUNS)):
        corpus = record.get("corpus") or {}
        if corpus.get("dataset") == dataset and "histograms" in corpus:
            return corpus["histograms"]
    return None


def run_record(config: Path, name: str, started_at: str, seconds: float, ok: bool) -> dict:
    """What the run made, for run.json, the results table and report.html (each folder of the store listed
    once for it: store.listed_folders)."""
    with listed_folders(run_config(str(config)).run.work_dir):
        return read_run_record(config, name, started_at, seconds, ok)


def read_run_record(config: Path, name: str, started_at: str, seconds: float, ok: bool) -> dict:
    from textmill.workflows.model_tasks import EvaluateLambada, ExportHF, TrainGPT

    config = str(config)
    settings = run_config(config)
    record = {"run": name, "config": config, "started": started_at, "seconds": round(seconds, 1),
              "status": "done" if ok else "failed"}
    if not ok:
        record["failed"] = [f"{s['task']}: {s['reason']}" for s in task_states(config) if s["state"] == "failed"]
    record.update(corpus_record(config))
    train = TrainGPT(config)
    if settings.train.enabled and train.complete():
        record["train"] = {k: v for k, v in read(train.output().done).items()
                           if k in ("iterations", "lm_loss", "valid_loss", "checkpoints", "started_from", "seconds")}
        evaluate, export = EvaluateLambada(config), ExportHF(config)
        if settings.evaluate.lambada and evaluate.complete():
            record["evaluate"] = [{"name": Path(r["valid_data"]).stem, "file": r["valid_data"], "accuracy": r["accuracy"],
                                   "correct": r["correct"], "total": r["total"], "perplexity": r["perplexity"]}
                                  for r in read(evaluate.output().done)["results"]]
        if settings.export.hf and export.complete():
            record["export"] = {k: v for k, v in read(export.output().done).items() if k in ("family", "output")}
    seconds_per_stage: dict[str, float] = {}
    for task in run_graph(config):
        if isinstance(task, RunTask):
            stage = task.stage.split("-", 1)[1]
            seconds_per_stage[stage] = seconds_per_stage.get(stage, 0.0) + task_seconds(task)
    record["seconds_per_stage"] = {k: round(v, 2) for k, v in seconds_per_stage.items()}
    return record


def record_run(config: Path, record: dict) -> Path:
    """Write the run's folder (runs/<name>[-k]), the newest report.html and the results table."""
    from textmill.report.page import write_report
    from textmill.report.results import read_runs, write_results

    settings = run_config(str(config))
    runs = settings.run.work_dir / RUNS
    runs.mkdir(parents=True, exist_ok=True)
    folder, k = runs / record["run"], 1
    while True:  # several workers on one central scheduler may start in the same second
        try:
            folder.mkdir()
            break
        except FileExistsError:
            k += 1
            folder = runs / f"{record['run']}-{k}"
    record["run"] = folder.name
    write_json(record, folder / "run.json")
    records = read_runs(runs)
    history = [r for r in records if r["run"] <= record["run"]][-settings.run.results_runs:]
    write_report(record, history, folder / "report.html")
    with atomic_path(settings.run.work_dir / "report.html") as tmp:
        shutil.copyfile(folder / "report.html", tmp)
    results = write_results(settings.run.work_dir, records, settings.run.results_runs)
    publish([folder / "run.json", folder / "report.html", settings.run.work_dir / "report.html", results,
             results.with_suffix(".tsv")])
    return folder
