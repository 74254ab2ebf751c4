"""The task framework of a run's Luigi graph: keys, the base tasks, and the files a graph starts from.

Every task takes the run's TOML file (`config`) and, for map stages, a shard number. As in Luigi's own
examples, a task says what it `requires()`, where its `output()` goes, and its `make()` reads its inputs
through `self.input()` (targets.py: local paths, fetched when WORK is in an object store).

Its output folder is WORK/STAGE/KEY, named by its key: the keys of what it requires and its own settings
(typed, defaults included, logging left out). Changing a cleanup setting gives cleanup and everything after
it new folders (they run again); the folders before it are found complete. Two kinds of task are keyed
otherwise, each saying why: a blacklist shard (by the URL lists up to its own), and a task that fans out
over the shuffled shards (by what the fan-out comes from). The steps of one stage that share its folder
(dedup's band pairs, clusters and filtered shards) take it from their input: each writes beside what it
reads.

A stage command (`textmill dedup IN... -o OUT`) runs one stage's tasks of this same graph: its `config` is
the JSON file the command writes (RunConfig.command names the stage), GivenFile stands in for the task
before the stage, the stage's own files go straight into OUT (targets.CommandOutput keeps a key record per
task there, since OUT is not keyed), and the folders of the steps before them lie in OUT/.textmill.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import luigi

from textmill.io.files import file_fingerprint, write_json
from textmill.io.store import listed_folders
from textmill.pipeline.shards import manifest_path, record_path, shard_stem
from textmill.run_file import CORPUS_STAGES, RunConfig
from textmill.pipeline.units import LineUnit, RowUnit
from textmill.workflows.memos import (
    PINNED_STAMPS,
    TASK_FOLDERS,
    TASK_KEYS,
    UNIT_TASKS,
    key_of,
    listed_inputs,
    listed_units,
    run_config,
)
from textmill.workflows.sources import dump_files, graph_inputs, input_kind
from textmill.workflows.targets import CommandOutput, ShardTarget, UnitTarget, WorkTarget
from textmill.workflows.variant_tasks import SharedAcrossVariants


# A unit of work the graph starts from: lines of a URL list or of JSON lines, rows of a Parquet file, or a
# whole file given to a stage command.
Unit = LineUnit | RowUnit | Path


def url_stamps(settings: RunConfig) -> tuple:
    """The modification and change times of the graph's input entries when first asked since memos.forget(): a file
    added to a folder changes the folder's; an edit whose modification time was put back still changes the change
    time."""
    if settings not in PINNED_STAMPS:
        PINNED_STAMPS[settings] = tuple((str(p), _times(p)) for p in graph_inputs(settings))
    return PINNED_STAMPS[settings]


def _times(path: Path) -> tuple[int, int] | None:
    """A path's modification and change times, None where Path.exists() says it is not there (missing, or a
    symbolic link loop, which its command then names in one line); one system call: every key asks."""
    try:
        stat = os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return None
        raise
    return stat.st_mtime_ns, stat.st_ctime_ns


def input_files(settings: RunConfig) -> tuple[Path, ...]:
    """The files the graph starts from, in order: the URL lists (or the shards, dumps or archives given to a
    stage command, or a run's archives), listed again only when an entry changes (every task asks, so listing
    each time made the graph quadratic in the number of files)."""
    if settings.command == "reddit-urls":
        return dump_files(settings)
    return listed_inputs(graph_inputs(settings), url_stamps(settings), input_kind(settings))


def input_units(settings: RunConfig) -> tuple[Unit, ...]:
    """The units of work the graph starts from, one shard each, in shard order: each URL list cut into
    units of at most [blacklist] urls_per_shard lines (cut once per file and machine); each web archive into
    units of at most [warc] responses_per_shard responses; each document file given to a stage command cut into
    units of at most [input] documents_per_shard documents, or taken whole when it is no bigger (and always by
    `textmill extract`, whose shards have their HTML beside)."""
    kind = input_kind(settings)
    per_unit = {"urls": settings.blacklist.urls_per_shard, "warc": settings.warc.responses_per_shard,
                "documents": 0 if settings.command == "extract" else settings.input.documents_per_shard}[kind]
    return listed_units(graph_inputs(settings), url_stamps(settings), kind, per_unit)


def num_shards(settings: RunConfig) -> int:
    return len(input_units(settings))


def every_unit(task_of, config: str) -> list:
    """`task_of(config, shard)` for every input unit of the run `config`, in order: what a reduce step requires (every
    band of dedup, every partition of the blacklist), made once (since memos.forget()), not once per reduce task."""
    memo = task_of, config
    if memo not in UNIT_TASKS:
        UNIT_TASKS[memo] = tuple(task_of(config, shard) for shard in range(num_shards(run_config(config))))
    return list(UNIT_TASKS[memo])


def unit_name(unit: Unit) -> str:
    """A unit's shard name in every stage: NAME-00042 for a unit cut from a file, a whole given shard's own."""
    return shard_stem(unit) if isinstance(unit, Path) else unit.name


class ParamsOnce:
    """Luigi lists a task class's parameters by walking dir(class) at every task it makes, which was a third of the
    time of a large graph's walk (`textmill status` at 2,000 units): here the list is made once per class (textmill
    adds no parameter to a class after its first task)."""

    @classmethod
    def get_params(cls):
        if "_listed_params" not in cls.__dict__:
            cls._listed_params = super().get_params()
        return list(cls._listed_params)


class RunTask(ParamsOnce, luigi.Task, metaclass=SharedAcrossVariants):
    """A task of the run described by `config`, writing into WORK/`stage`/KEY (a variant's task that has the
    key of an earlier variant's is that task: variant_tasks.py)."""

    config = luigi.Parameter(description="the run's TOML file (a stage command's JSON file)")
    stage: str
    # Tries in one run of a task whose failure a retry may cure (a network fault, a killed process); a
    # deterministic failure is not retried (runner.FailFastWorker).
    retry_count = 2
    # Modules its make() imports that take long to import, imported once by the process that forks the workers
    # (workers.py), which then never pay them per task: pandas for every task, since pyarrow imports it the
    # first time it converts Python data (a shard's rows) where it is installed (textmill does not need it).
    libraries: tuple[str, ...] = ("pandas",)
    # Whether an earlier task's output made from the same input bytes (reuse_inputs) and settings (reuse_settings) is
    # taken instead of making it again (reuse.py): in a run, not in a stage command, whose output folder is not keyed.
    reusable = False

    @property
    def settings(self) -> RunConfig:
        return run_config(self.config)

    @property
    def work(self) -> Path:
        return self.settings.run.work_dir

    def own_settings(self) -> tuple:
        """What of the run's settings (and given files) changes this task's output."""
        return ()

    def keyed_requires(self) -> list:
        """The requirements whose keys are part of this task's: all of them."""
        return luigi.task.flatten(self.requires())

    def memo(self) -> tuple:
        """What this task's key and folder are computed once per (since memos.forget()): its id and the settings."""
        return self.task_id, self.settings

    def key(self) -> str:
        """The hash naming this task's output folder. Keys are chains (a dedup key holds every shard's
        scrape key), so each is computed once per configuration and list of URL files."""
        memo = self.memo()
        if memo not in TASK_KEYS:
            TASK_KEYS[memo] = self.own_key()
        return TASK_KEYS[memo]

    def own_key(self) -> str:
        return key_of(*(task.key() for task in self.keyed_requires()), *self.own_settings())

    def folder(self) -> Path:
        memo = self.memo()
        if memo not in TASK_FOLDERS:
            TASK_FOLDERS[memo] = self.own_folder()
        return TASK_FOLDERS[memo]

    def own_folder(self) -> Path:
        if self.writes_command_output():
            return self.work
        steps = self.work / ".textmill" if self.settings.command else self.work
        return steps / self.stage / self.key()

    def input_of(self, name: str):
        """The target of the requirement `name` alone (self.input() makes every requirement's)."""
        return self.requires()[name].output()

    def writes_command_output(self) -> bool:
        """Whether this task writes into a stage command's output folder, which is not keyed (the tasks of the
        stage's output folder; the steps before it, signatures, band keys..., go to OUT/.textmill/STAGE/KEY)."""
        command = self.settings.command
        return command is not None and self.stage == CORPUS_STAGES[command]

    @property
    def step(self) -> str:
        """The step of the run it is, as the run's time per stage names it: its folder without the number
        (3-minhash: minhash)."""
        return self.stage.split("-", 1)[1]

    def target(self) -> WorkTarget:
        """What the task writes: by default its record, .task.json."""
        return WorkTarget(self.folder(), record_path(self.folder(), "task.json"))

    def output(self):
        if not self.writes_command_output():
            return self.target()
        task = self.command_task_id()
        return CommandOutput(self.target(), self.work / ".textmill" / "keys" / f"{task}.json", task, self.key,
                             self.work)

    def command_task_id(self) -> str:
        """The task's id but for its command file, whose path differs from machine to machine."""
        return luigi.task.task_id_str(self.task_family, {k: v for k, v in self.to_str_params().items() if k != "config"})

    def run(self):
        later = [task for task in self.requires_later() if not task.complete()]
        if later:
            yield later
        self.produce()

    def produce(self) -> None:
        """Write the task's output, its inputs being there: begun, made (or taken from an earlier task that made it
        from the same input bytes: reuse.py), committed (done file last)."""
        from textmill.workflows import reuse

        output = self.output()
        inputs = self.reuse_inputs() if self.reusable and self.settings.command is None else None
        output.begin()
        taken = inputs is not None and reuse.take_earlier(self, inputs)
        if not taken:
            self.make()
        output.commit()
        if inputs is not None and not taken:  # once committed: an index never names a folder without its output
            reuse.remember(self)

    def reuse_inputs(self) -> list[Path]:
        """Of a reusable task: the local files (current here) whose bytes, with reuse_settings(), decide its output
        whole."""
        raise NotImplementedError

    def reuse_settings(self) -> tuple:
        """What besides its inputs' bytes its output depends on: its own settings."""
        return self.own_settings()

    def reuse_name(self) -> str:
        """Which of its stage's outputs it makes (its files' names in the stage's folder)."""
        return "-".join([self.task_family, *(str(v) for k, v in self.param_kwargs.items() if k != "config")])

    def requires_later(self) -> list:
        """Requirements known only once those of requires() have finished (a fan-out over the shuffled
        shards, whose count the shuffle's plan decides): yielded by run, Luigi's dynamic dependencies."""
        return []

    def input_later(self) -> list:
        return [task.output() for task in self.requires_later()]

    def make(self) -> None:
        """The task's work, on local paths: its inputs read through self.input(), its files written where
        self.output() names them (committed to the store, when WORK is in one, after it returns)."""
        raise NotImplementedError

    def finish(self, **result) -> None:
        """Write the task's record, its done file."""
        write_json({"task": self.task_id, "key": self.key(), **result}, self.output().done)

    def shown(self) -> str:
        """The task as a person reads it: its class and parameters but the run file."""
        return f"{self.task_family}({', '.join(f'{k}={v}' for k, v in self.param_kwargs.items() if k != 'config')})"


class ShardTask(RunTask):
    """A task per shard of the run's input (a unit of a URL list, or a shard given to a stage command)."""

    shard = luigi.IntParameter(description="shard number (position of its input unit, in order)")
    fanned_by = "shard"  # the parameter that numbers its stage's tasks (batches.py cuts them into batches)

    def fan_count(self) -> int:
        """How many tasks its stage has: one per input unit."""
        return num_shards(self.settings)

    def name(self) -> str:
        return unit_name(input_units(self.settings)[self.shard])

    def reuse_name(self) -> str:
        return self.name()

    def shown(self) -> str:
        return f"{self.task_family}({self.name()})"

    def target(self) -> ShardTarget:
        shard = self.folder() / f"{self.name()}.parquet"
        return ShardTarget(shard, manifest_path(shard))


class GivenFile(ParamsOnce, luigi.ExternalTask):
    """Input unit `shard` of the graph: lines of a URL list of [run] urls, or a document file given to a
    stage command, whole or a unit of it. A unit is keyed by its own bytes and where it lies (its rows name
    their file and line): a line added to the end of a list changes no earlier unit's key."""

    config = luigi.Parameter(description="the run's TOML file (a stage command's JSON file)")
    shard = luigi.IntParameter(description="position of the input unit, in order")
    fanned_by = "shard"

    def fan_count(self) -> int:
        return num_shards(run_config(self.config))

    def unit(self) -> Unit:
        return input_units(run_config(self.config))[self.shard]

    def path(self) -> Path:
        unit = self.unit()
        return unit if isinstance(unit, Path) else unit.path

    def key(self) -> str:
        unit = self.unit()
        return file_fingerprint(unit)["sha256"] if isinstance(unit, Path) else key_of(unit.shown(), unit.sha256)

    def output(self) -> ShardTarget:
        unit = self.unit()
        return ShardTarget(unit, unit) if isinstance(unit, Path) else UnitTarget(unit)

    def shown(self) -> str:
        unit = self.unit()
        return f"{self.task_family}({unit.name if isinstance(unit, Path) else unit.shown()})"


class CutUnit(ShardTask):
    """A unit of a document file given to a stage command, written as a file of its own in the file's
    format (its lines, or its rows), which the stage's tasks read as they read a whole given file."""

    stage = "0-units"

    def requires(self):
        return GivenFile(self.config, self.shard)

    def target(self) -> ShardTarget:
        from textmill.pipeline.units import origin_path

        suffix = ".jsonl" if isinstance(input_units(self.settings)[self.shard], LineUnit) else ".parquet"
        unit_file = self.folder() / f"{self.name()}{suffix}"
        return ShardTarget(unit_file, origin_path(unit_file), with_done=True)

    def make(self):
        from textmill.pipeline.units import write_unit

        given = self.input()
        given.local()
        write_unit(given.unit, self.output().shard)


def given_or(command: str, task: ShardTask) -> ShardTask | GivenFile | CutUnit:
    """What writes the shard a task reads: `task`, or, when the stage command `command` runs the reading
    task's stage alone, the file it was given in its place (a unit of it, cut)."""
    return given_unit(task.config, task.shard) if run_config(task.config).command == command else task


def given_unit(config: str, shard: int) -> GivenFile | CutUnit:
    """Unit `shard` of a stage command's given files: the file itself, or the unit cut from it."""
    whole = isinstance(input_units(run_config(config))[shard], Path)
    return GivenFile(config, shard) if whole else CutUnit(config, shard)


def graph(targets: list[luigi.Task]) -> list[luigi.Task]:
    """Every task the targets need, once each, requirements first: those known only once others have finished
    (requires_later) included as far as they are known."""
    seen: dict[str, luigi.Task] = {}

    def visit(task: luigi.Task) -> None:
        if task.task_id in seen:
            return
        later = task.requires_later() if isinstance(task, RunTask) else []
        for required in [*luigi.task.flatten(task.requires()), *later]:
            visit(required)
        seen[task.task_id] = task

    for target in targets:
        visit(target)
    return list(seen.values())


def work_folders(tasks: list[luigi.Task]) -> set[Path]:
    """The work folders of these tasks' runs (every task of a graph names its run file: `config`)."""
    return {run_config(task.config).run.work_dir for task in tasks if isinstance(getattr(task, "config", None), str)}


def warm(targets: list[luigi.Task]) -> None:
    """Before worker processes are forked from this one: every task's key and output computed (memos they
    inherit) and the libraries its tasks import loaded, so no worker pays either again (a library that is not
    installed is left to the task that needs it, which says so)."""
    import importlib
    import importlib.util

    with listed_folders(*work_folders(targets)):
        for task in graph(targets):
            task.output()
            for library in getattr(task, "libraries", ()):
                if importlib.util.find_spec(library) is not None:
                    importlib.import_module(library)
