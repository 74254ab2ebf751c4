"""The tasks the scheduler hands out: each stage's tasks in batches, at most [run] tasks_per_stage of them.

A stage has a task per input unit (or per LSH band, per shuffled shard...): 8 tasks per unit for a run, 16,041
for 2,000 units. luigid looks at every task of the graph each time a worker asks for work (11 to 17
microseconds a task, in one thread: 270 ms a hand-out at 16,041), and every task handed out costs a round
trip, a completeness check and its scheduling. So what Luigi schedules is batches: each stage's tasks cut
into at most tasks_per_stage runs of consecutive ones (as datatrove cuts its input into a task per rank), so
the graph's size is bounded by that setting, not by the input's. A batch runs its unfinished tasks one after
another, each committed as it finishes, so a batch lost part-way redoes only its unfinished tasks, and one
task's failure does not stop the others; it is complete when all its tasks are. The tasks are unchanged:
they name the folders, are keyed, and are what `textmill status` and the run record read; a stage's
batching is in no key, and changes no output.

A task that numbers its stage's tasks by a parameter says which (`fanned_by`) and how many there are
(`fan_count()`); any other task (the clusters, the shuffle's plan, a wrapper) is a batch of its own.
"""

from __future__ import annotations

import functools
import time

import luigi
import luigi.task_register

from textmill.io.progress import progress, ticking
from textmill.io.store import listed_folders
from textmill.workflows.framework import ParamsOnce, RunTask
from textmill.workflows.memos import run_config

# [run] tasks_per_stage when it is 0: per worker process of a run that schedules its own work (Luigi's own scheduler
# looks at the whole graph at every hand-out: a run of 100 units took 34.3 s with 128 a stage, 21.0 s with 4), and
# on a central scheduler, whose machines must all cut the stages alike whatever their --workers.
PER_WORKER = 4
WITH_CENTRAL_SCHEDULER = 128


def tasks_per_stage(config: str, workers: int, scheduler_url: str | None) -> int:
    """How many batches a stage is cut into at most, for a build by `workers` worker processes."""
    given = run_config(config).run.tasks_per_stage
    return given or (WITH_CENTRAL_SCHEDULER if scheduler_url else PER_WORKER * workers)


class Batch(ParamsOnce, luigi.Task):
    """Tasks `first` to `stop` (not included) of the class `family`'s stage, numbered by its `fanned_by`
    parameter (a task of a class that fans out by none: the task of `params` alone)."""

    config = luigi.Parameter(description="the run's TOML file (a stage command's JSON file)")
    family = luigi.Parameter(description="the class of its tasks")
    first = luigi.IntParameter(description="the number of its first task")
    stop = luigi.IntParameter(description="the number after its last task")
    per_stage = luigi.IntParameter(description="the most batches a stage is cut into, its requirements' too")
    params = luigi.DictParameter(default={}, description="a task that fans out by nothing: its parameters but config")
    retry_count = RunTask.retry_count

    @functools.cached_property
    def tasks(self) -> list[luigi.Task]:
        kind = luigi.task_register.Register.get_task_cls(self.family)
        fanned_by = getattr(kind, "fanned_by", None)
        if fanned_by is None:
            return [kind.from_str_params({"config": self.config, **self.params})]
        return [kind(self.config, **{fanned_by: number}) for number in range(self.first, self.stop)]

    @property
    def work(self):
        return run_config(self.config).run.work_dir

    def requires(self):
        return batched([required for task in self.tasks for required in luigi.task.flatten(task.requires())],
                       self.per_stage, leaving_out=self.task_id)

    def complete(self) -> bool:
        with listed_folders(self.work):  # its tasks' folders listed once, not asked about a task at a time
            return all(task.complete() for task in self.tasks)

    def run(self):
        later = [task for task in self.tasks if isinstance(task, RunTask) for task in task.requires_later()]
        with listed_folders(self.work):
            later = [task for task in later if not task.complete()]
            unfinished = [task for task in self.tasks if isinstance(task, RunTask) and not task.complete()]
        if later:  # requirements known once others finished (the fan-out over the shuffled shards)
            yield batched(later, self.per_stage)
        failures = []
        # Inputs are finished before a batch runs (and before the later ones are asked for), so their versions
        # come from a listing of each stage folder read, not a HEAD per file and read: a band reads every
        # unit's keys, a partition every unit's ids. What the tasks write or remove is kept in the listings.
        # A line every TEXTMILL_PROGRESS_S seconds (or a bar) while it works: a run is never silent for long.
        stage = getattr(luigi.task_register.Register.get_task_cls(self.family), "stage", self.family)
        which = f"task {self.first}" if self.stop - self.first == 1 else f"tasks {self.first}-{self.stop - 1}"
        counter = progress(total=len(unfinished), desc=f"{stage} {which}", unit="task", leave=False)
        with listed_folders(self.work), ticking(counter) as done:
            for task in unfinished:
                started = time.perf_counter()
                try:
                    task.produce()
                except Exception as exc:  # the others still run; the batch fails with the first failure
                    task.trigger_event(luigi.Event.FAILURE, task, exc)
                    failures.append(exc)
                    continue
                finally:
                    done.update(1)
                task.trigger_event(luigi.Event.SUCCESS, task)
                task.trigger_event(luigi.Event.PROCESSING_TIME, task, time.perf_counter() - started)
        if failures:
            raise failures[0]


class GivenBatch(Batch):
    """A batch of tasks that are given, not run (the input units, a named vocabulary): done when they are all
    there."""

    run = None  # what makes Luigi take a task as external


def batch_of(task: luigi.Task, per_stage: int) -> Batch:
    """The batch that holds `task` when its stage is cut into at most `per_stage` batches."""
    return batch_at(batch_place(task, per_stage), per_stage)


def batch_place(task: luigi.Task, per_stage: int) -> tuple:
    """Which batch holds `task`: whether its tasks are given, their run file, class and range, and the parameters of
    a task that fans out by none (a tuple, cheap to compare: a band of dedup asks it of every unit's task)."""
    given = task.run is None
    fanned_by = getattr(task, "fanned_by", None)
    if fanned_by is None:
        params = tuple((name, value) for name, value in task.to_str_params().items() if name != "config")
        return given, task.config, task.task_family, 0, 1, params
    number, count = getattr(task, fanned_by), task.fan_count()
    # min(per_stage, count) batches whose sizes differ by one at most (10 tasks in 8: six of 1, two of 2, not
    # five of 2), so that the workers' last round of a stage is as short as it can be.
    batches = min(per_stage, count)
    index = ((number + 1) * batches - 1) // count  # the batch i with i*count//batches <= number < (i+1)*...
    return given, task.config, task.task_family, index * count // batches, (index + 1) * count // batches, ()


def batch_at(place: tuple, per_stage: int) -> Batch:
    given, config, family, first, stop, params = place
    return (GivenBatch if given else Batch)(config, family, first, stop, per_stage, dict(params))


def batched(tasks: list[luigi.Task], per_stage: int, leaving_out: str | None = None) -> list[Batch]:
    """The batches that hold `tasks`, each once, in the order of the tasks (but `leaving_out`'s)."""
    places = dict.fromkeys(batch_place(task, per_stage) for task in tasks)
    return [batch for batch in (batch_at(place, per_stage) for place in places) if batch.task_id != leaving_out]
