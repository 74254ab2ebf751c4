"""The corpus stages as a run reports them, and each stage's record, written once by a task of the graph.

A run's record (run_records.py) holds each corpus stage's counts (in, kept, rejected by reason), its time,
a few examples and the stage's own figures (dedup's clusters, decontamination's n-grams). Reading those
from every shard's manifest and every task's time record cost each process that records the run about 5
requests per task: at 2,000 units and 64 processes, millions of requests after the work. So each stage's
record is a task of its own (StageRecord), run once by one worker when the stage is finished; a run's record
then reads one file per stage.

STAGES gives each of the run file's corpus stages (run_file.CORPUS_STAGES, in graph order) its tasks: those
whose outputs are the stage's shards, the stage's other steps (their time is the stage's), the task whose done
file is what its command reports besides the counts, whether a run has the stage, and the stage's own part of
the record. A run, a stage command, a stage's record and the funnel all go through this list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import luigi

from textmill.io.files import read_json_record, write_json
from textmill.io.store import fetch
from textmill.pipeline.shards import manifest_path, record_path
from textmill.run_file import RunConfig
from textmill.workflows import corpus_tasks as c
from textmill.workflows.classify_tasks import ClassifyShard, TrainClassifier
from textmill.workflows import shuffle_tasks as s
from textmill.workflows.framework import RunTask, ShardTask, every_unit
from textmill.workflows.memos import run_config
from textmill.workflows.records import stage_tasks
from textmill.workflows.source_tasks import RedditLinks, WarcShard, source_tasks


def per_unit(kind: type) -> Callable[[str], list]:
    """A task of class `kind` per input unit of the run `config`."""
    return lambda config: every_unit(kind, config)


def read(path: Path) -> dict:
    """A done file or manifest of a task found complete (so whole)."""
    return read_json_record(path, "ignored") or {}


def shard_files(tasks: list) -> list[Path]:
    """The shards a stage's `shards` tasks write: one each, or a set's (the shuffle's, decontamination's)."""
    if isinstance(tasks[0], (ShardTask, RedditLinks)):
        return [task.output().shard for task in tasks]
    return tasks[0].output().shards


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


def blacklist_steps(config: str) -> list:
    partitions = run_config(config).blacklist.duplicate_partitions
    return [*per_unit(c.BlacklistCheck)(config), *(c.BlacklistDuplicates(config, p) for p in range(partitions))]


def dedup_steps(config: str) -> list:
    clusters = c.DedupClusters(config)
    return [clusters, *luigi.task.flatten(clusters.requires())]  # the band merges, signatures, band keys


def dedup_part(config: str, examined: list[Path], manifests: list[dict]) -> dict:
    """Dedup's clusters, and a few duplicates with the documents they duplicate."""
    from textmill.report.samples import duplicate_pairs

    clusters = c.DedupClusters(config).output()
    found = read(clusters.files["clusters"])
    return {"dedup": read(clusters.done),
            "duplicate_pairs": duplicate_pairs(found.get("duplicates", {}), set(found.get("exact", [])), examined)}


def classify_part(config: str, examined: list[Path], manifests: list[dict]) -> dict:
    """The classifier: its held-out evaluation (trained in the run) or the model given, and the scores' histogram."""
    histogram = [sum(counts) for counts in zip(*(m.get("score_histogram", [0] * 10) for m in manifests), strict=True)]
    return {"classifier": {**read(TrainClassifier(config).output().done), "score_histogram": histogram}}


def shuffle_steps(config: str) -> list:
    return [*per_unit(s.ShuffleScatter)(config), s.ShufflePlan(config), *s.Shuffle(config).requires_later()]


def decontaminate_steps(config: str) -> list:
    select = s.DecontaminateSelect(config)
    return [select, *select.requires_later(), *s.Decontaminate(config).requires_later()]


def decontaminate_part(config: str, examined: list[Path], manifests: list[dict]) -> dict:
    """The evaluation n-grams found and used, and the first documents they touched."""
    from textmill.pipeline.decontaminate import TOUCHED_LISTED

    settings = run_config(config)
    return {"decontaminate": {**read(s.Decontaminate(config).output().done),
                              "key_threshold": settings.decontaminate.key_threshold,
                              "touched": [d for m in manifests for d in m.get("touched", [])][:TOUCHED_LISTED]}}


@dataclass(frozen=True)
class Stage:
    name: str
    shards: Callable[[str], list]  # config -> the tasks that write its shards (a ShardSet's task: one)
    steps: Callable[[str], list] = lambda config: []  # config -> its other tasks (their time is the stage's)
    in_run: Callable[[RunConfig], bool] = lambda settings: True  # whether a run of these settings has it
    part: Callable[[str, list[Path], list[dict]], dict] = lambda config, examined, manifests: {}  # its own figures
    summary: Callable[[str], luigi.Task] | None = None  # config -> the task whose done file its command reports

    def targets(self, config: str) -> list:
        """The tasks whose completion is the stage's (its command's targets): its shards', then its summary's."""
        shards = self.shards(config)
        summary = self.summary(config) if self.summary else None
        return shards if summary is None or summary in shards else [*shards, summary]


STAGES = (
    Stage("reddit-urls", source_tasks, in_run=lambda settings: bool(settings.run.reddit_dumps)),
    Stage("blacklist", per_unit(c.BlacklistShard), blacklist_steps, in_run=lambda settings: not settings.run.warcs),
    Stage("scrape", per_unit(c.ScrapeShard), in_run=lambda settings: not settings.run.warcs),
    Stage("warc", per_unit(WarcShard), in_run=lambda settings: bool(settings.run.warcs)),
    # Pages a scrape kept, extracted again (`textmill extract`): a command's stage, in no run.
    Stage("extract", per_unit(c.ExtractShard), in_run=lambda settings: False),
    Stage("dedup", per_unit(c.DedupShard), dedup_steps, part=dedup_part, summary=c.DedupClusters),
    Stage("clean", per_unit(c.CleanShard)),
    Stage("quality", per_unit(c.QualityShard), in_run=lambda settings: settings.quality.preset != "none"),
    Stage("classify", per_unit(ClassifyShard), lambda config: [TrainClassifier(config)],
          in_run=lambda settings: settings.classify.enabled, part=classify_part, summary=TrainClassifier),
    Stage("shuffle", lambda config: [s.Shuffle(config)], shuffle_steps, summary=s.Shuffle),
    Stage("decontaminate", lambda config: [s.Decontaminate(config)], decontaminate_steps,
          in_run=lambda settings: bool(settings.decontaminate.eval_files), part=decontaminate_part,
          summary=s.Decontaminate),
)
STAGE_NAMES = {stage.name: stage for stage in STAGES}


def run_stages(settings: RunConfig) -> list[Stage]:
    """The corpus stages a run of these settings has, in graph order."""
    return [stage for stage in STAGES if stage.in_run(settings)]


class StageRecord(RunTask):
    """One corpus stage's part of a run's record, once the stage is finished: its counts over every shard's
    manifest, its time over every task's, examples from its first shards, and its own figures. Keyed by the
    stage's tasks, so written once per output of the stage."""

    stage = "records"
    name = luigi.Parameter(description="the corpus stage")

    def requires(self):
        return STAGE_NAMES[self.name].shards(self.config)

    def own_settings(self) -> tuple:
        return (self.name,)

    def own_folder(self) -> Path:
        return self.work / self.stage / self.name / self.key()

    def target(self):
        from textmill.workflows.targets import WorkTarget

        return WorkTarget(self.folder(), record_path(self.folder(), "stage.json"))

    def make(self):
        from textmill.report.lines import stage_summary
        from textmill.report.samples import SCANNED_SHARDS, stage_examples

        stage, tasks = STAGE_NAMES[self.name], self.requires()
        shards = shard_files(tasks)
        manifests = [read(manifest_path(p)) for p in shards]
        examined = local_copies(shards[:SCANNED_SHARDS])  # the shards the report's examples come from
        seconds, counts = stage_tasks([*tasks, *stage.steps(self.config)])
        summary = stage_summary(self.name, manifests, tasks[0].folder(), sum(seconds.values()), counts)
        write_json({"funnel": summary.to_dict(), "samples": stage_examples(examined, list(summary.reasons)),
                    "seconds_per_stage": seconds, **stage.part(self.config, examined, manifests)}, self.output().done)
