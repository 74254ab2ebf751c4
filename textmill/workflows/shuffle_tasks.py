"""The corpus tasks from the cleaned shards to the finished documents: the shuffle and decontamination.

    cleaned(i) -> ShufflePlan -> ShuffleScatter(i) -> ShuffleGather(j) -> Shuffle
      -> DecontaminateCount(j) -> DecontaminateSelect -> DecontaminateShard(j) -> Decontaminate

How many shards the shuffle writes is [shuffle] num_shards, or, when that is 0, what ShufflePlan chooses
from the cleaned corpus's size; so the tasks that need one task per shuffled shard (PerShuffledShard) know
their fan-out only once the plan has finished, and yield it then (Luigi's dynamic dependencies).
"""

from __future__ import annotations

import sys
from pathlib import Path

import luigi

from textmill.io.files import file_fingerprint
from textmill.io.store import fetch
from textmill.pipeline.shards import manifest_path, record_path, shard_stem
from textmill.run_file import RunConfig
from textmill.workflows.classify_tasks import ClassifyShard, filtered
from textmill.workflows.corpus_tasks import CleanShard, QualityShard
from textmill.workflows.framework import GivenFile, RunTask, ShardTask, every_unit, given_or, given_unit, key_of
from textmill.workflows.memos import GATHERED_FROM, PLANNED_COUNTS, run_config
from textmill.workflows.parts import corpus_parts, in_parts, part_of_bucket, write_ledger
from textmill.workflows.targets import ShardSet, ShardTarget, WorkTarget


def cleaned(config: str, shard: int) -> CleanShard | QualityShard | ClassifyShard | GivenFile:
    """The cleaned shard the shuffle reads: the classifier's when [classify] has one, else cleanup's or the quality
    filters' (classify_tasks.filtered); the file given to `textmill shuffle`."""
    chosen = ClassifyShard(config, shard) if run_config(config).classify.enabled else filtered(config, shard)
    return given_or("shuffle", chosen)


def shuffle_settings(settings: RunConfig) -> tuple:
    """What of [shuffle] changes the shuffle's output: the shard count, or the size it is derived from."""
    count = settings.shuffle.num_shards or ("target_shard_mb", settings.shuffle.target_shard_mb)
    return count, settings.run.seed


def planned_count(plan: WorkTarget) -> int | None:
    """The shard count ShufflePlan wrote, None until it has."""
    if plan.done not in PLANNED_COUNTS and plan.exists():
        PLANNED_COUNTS[plan.done] = plan.record()["num_shards"]
    return PLANNED_COUNTS.get(plan.done)


def finished_count(shards: ShardSet) -> int | None:
    """How many shards a finished stage wrote, None until it has finished."""
    return len(shards.shards) if shards.exists() else None


def shuffled_shard(folder: Path, bucket: int) -> Path:
    return folder / f"part-{bucket:05d}.parquet"


class PerShuffledShard(RunTask):
    """A task that fans out over the shuffled shards (`fan_out(count)`). It requires what the fan-out comes
    from, so it is keyed by that and by its own settings (which are those of the tasks it fans out to);
    its run yields the fan-out once the count is known."""

    def shard_count(self) -> int | None:
        raise NotImplementedError

    def fan_out(self, count: int) -> list:
        raise NotImplementedError

    def requires_later(self) -> list:
        count = self.shard_count()
        return [] if count is None else self.fan_out(count)


class ShufflePlan(RunTask):
    """The shuffle's shard count: [shuffle] num_shards, or, when that is 0, one from the cleaned shards'
    sizes and target_shard_mb. The first step of the shuffle: its key names the shuffle's folder."""

    stage = "5-shuffle"

    def requires(self):
        return every_unit(cleaned, self.config)

    def own_settings(self) -> tuple:
        return (*shuffle_settings(self.settings), *((corpus_parts(self.settings),) if in_parts(self.settings) else ()))

    def target(self) -> WorkTarget:
        return WorkTarget(self.folder(), record_path(self.folder(), "plan.json"))

    def make(self):
        from textmill.io.files import write_json
        from textmill.pipeline.shuffle import shard_count

        shuffle, shards, parts = self.settings.shuffle, self.input(), corpus_parts(self.settings)
        if shuffle.num_shards:
            counts, plan = [shuffle.num_shards] * len(parts), {}
        else:
            sizes = [sum(shards[i].bytes() for i in part) for part in parts]
            counts = [shard_count(size, shuffle.target_shard_mb) for size in sizes]
            plan = {"input_bytes": sum(sizes), "target_shard_mb": shuffle.target_shard_mb}
        plan["num_shards"] = sum(counts)
        if in_parts(self.settings):  # each part's shards follow the earlier parts'
            plan["part_shards"] = counts
        write_json(plan, self.output().done)
        write_ledger(self.settings)


class ShuffleScatter(ShardTask):
    """One cleaned shard's documents sorted by the output shard of the shuffle their id hashes to. With a
    shard count given it waits for its own cleaned shard only."""

    stage = "5-shuffle-scatter"
    reusable = True

    def requires(self):
        shard = {"shard": cleaned(self.config, self.shard)}
        return shard if self.settings.shuffle.num_shards else {**shard, "plan": ShufflePlan(self.config)}

    def own_settings(self) -> tuple:
        return *shuffle_settings(self.settings), self.settings.input.max_document_bytes

    def target(self) -> ShardTarget:
        from textmill.pipeline.shuffle import scatter_record

        scattered = self.folder() / f"{self.name()}.parquet"
        return ShardTarget(scattered, scatter_record(scattered))

    def shard_count(self) -> int:
        """How many shards its part of the corpus is shuffled into (the whole corpus, in the single form)."""
        if self.settings.shuffle.num_shards:
            return self.settings.shuffle.num_shards
        plan = self.input()["plan"].record()
        part = next(n for n, units in enumerate(corpus_parts(self.settings)) if self.shard in units)
        return plan.get("part_shards", [plan["num_shards"]])[part]

    def reuse_inputs(self) -> list[Path]:
        return [self.input()["shard"].local()]

    def reuse_settings(self) -> tuple:
        return *self.own_settings(), self.shard_count()

    def make(self):
        from textmill.pipeline.shuffle import scatter_shard

        scatter_shard(self.input()["shard"].local(), self.output().shard, self.shard_count(), self.settings.run.seed,
                      self.settings.input.max_document_bytes)


class ShuffleGather(RunTask):
    """One output shard of the shuffle: its bucket of every scattered shard of its part, permuted; written beside the
    plan."""

    stage = "5-shuffle"
    reusable = True
    bucket = luigi.IntParameter(description="output shard number")
    fanned_by = "bucket"

    def fan_count(self) -> int:
        return Shuffle(self.config).shard_count()

    def requires(self):
        return {"plan": ShufflePlan(self.config),
                "scattered": every_unit(ShuffleScatter, self.config)}

    def own_folder(self) -> Path:
        return self.input_of("plan").folder

    def target(self) -> ShardTarget:
        shard = shuffled_shard(self.folder(), self.bucket)
        return ShardTarget(shard, manifest_path(shard))

    def gathered_from(self) -> tuple[list, int, int]:
        """Its part's scattered shards, and its own number and the shard count within the part (in the single form,
        every scattered shard, its bucket and the plan's count); asked once its plan is written, by reuse and make,
        and made once (its inputs are every scattered shard's target)."""
        memo = self.memo()
        if memo not in GATHERED_FROM:
            given = self.input()
            part, first, count = part_of_bucket(given["plan"].record(), self.bucket)
            GATHERED_FROM[memo] = ([given["scattered"][i] for i in corpus_parts(self.settings)[part]],
                                   self.bucket - first, count)
        return GATHERED_FROM[memo]

    def reuse_inputs(self) -> list[Path]:
        return [scattered.local() for scattered in self.gathered_from()[0]]

    def reuse_settings(self) -> tuple:
        return *self.gathered_from()[1:], self.settings.run.seed

    def make(self):
        from textmill.pipeline.shuffle import gather_bucket

        scattered, bucket, count = self.gathered_from()
        for shard in scattered:  # the records, current here; gather_bucket reads only this bucket's row group of each
            fetch(shard.done)
        gather_bucket([s.shard for s in scattered], bucket, self.output().shard, count, self.settings.run.seed)


class Shuffle(PerShuffledShard):
    """The shuffled corpus, beside its plan: done when every output shard is (ShuffleScatter per cleaned
    shard, then ShuffleGather per output shard, each a task of its own)."""

    stage = "5-shuffle"

    def requires(self):
        return ShufflePlan(self.config)

    def own_folder(self) -> Path:
        return self.input().folder

    def shard_count(self) -> int | None:
        return planned_count(self.input())

    def fan_out(self, count: int) -> list:
        return [ShuffleGather(self.config, b) for b in range(count)]

    def target(self) -> ShardSet:
        folder = self.folder()
        return ShardSet(folder, record_path(folder, "task.json"),
                        [shuffled_shard(folder, b) for b in range(self.shard_count() or 0)])

    def make(self):
        from textmill.pipeline.shuffle import empty_shards_note

        manifests = [shard.record() for shard in self.input_later()]
        note = empty_shards_note(manifests)
        if note:
            print(f"textmill: {note}", file=sys.stderr)
        self.finish(documents=sum(m["counts"]["kept"] for m in manifests), shards=len(manifests), note=note)


class GivenShards(luigi.Task):
    """The shards given to `textmill decontaminate` (or the units cut from them), in the place of the
    shuffled corpus: finished when they are all there."""

    config = luigi.Parameter(description="the stage command's file")

    def requires(self):
        return every_unit(given_unit, self.config)

    def key(self) -> str:
        return key_of([given.key() for given in self.requires()])

    def output(self) -> ShardSet:
        return ShardSet(None, None, [given.output().shard for given in self.requires()])


def shuffled(config: str) -> Shuffle | GivenShards:
    """The shuffled corpus decontamination reads (given to `textmill decontaminate`)."""
    return GivenShards(config) if run_config(config).command == "decontaminate" else Shuffle(config)


def decontamination_settings(settings: RunConfig) -> tuple:
    """What changes decontamination's output: its evaluation sets' contents, [decontaminate] and the
    largest document taken from a given file."""
    cfg = settings.decontaminate
    return [file_fingerprint(p)["sha256"] for p in cfg.eval_files], cfg.params(), settings.input.max_document_bytes


class DecontaminateCount(RunTask):
    """Pass 1 on one shuffled shard: how often each evaluation n-gram occurs in it. The first step of
    decontamination: its key (every shard's the same) names the stage's folder."""

    stage = "6-decontaminate"
    part = luigi.IntParameter(description="shuffled shard number")
    fanned_by = "part"
    reusable = True

    def fan_count(self) -> int:
        return DecontaminateSelect(self.config).shard_count()

    def requires(self):
        return shuffled(self.config)

    def own_settings(self) -> tuple:
        return decontamination_settings(self.settings)

    def target(self) -> WorkTarget:
        name = shard_stem(self.input().shards[self.part])
        return WorkTarget(self.folder(), record_path(self.folder(), "counts") / f"{name}.counts.json")

    def reuse_inputs(self) -> list[Path]:
        return [self.input().local_shard(self.part)]

    def make(self):
        from textmill.pipeline.decontaminate import count_matches, eval_ngrams, write_counts

        cfg = self.settings.decontaminate
        counts = count_matches(self.input().local_shard(self.part), eval_ngrams(cfg.eval_files, cfg), cfg.max_ngram,
                               self.settings.input.max_document_bytes)
        write_counts(counts, self.output().done)


class DecontaminateSelect(PerShuffledShard):
    """The n-grams pass 2 cuts: the counts of every shard added up, those seen fewer than key_threshold
    times. Keyed as the counts are, so written beside them."""

    stage = "6-decontaminate"

    def requires(self):
        return shuffled(self.config)

    def own_settings(self) -> tuple:
        return decontamination_settings(self.settings)

    def shard_count(self) -> int | None:
        return finished_count(self.input())

    def fan_out(self, count: int) -> list:
        return [DecontaminateCount(self.config, j) for j in range(count)]

    def target(self) -> WorkTarget:
        return WorkTarget(self.folder(), record_path(self.folder(), "selected.json"))

    def make(self):
        from textmill.pipeline.decontaminate import select_from_counts

        select_from_counts([counts.local() for counts in self.input_later()], self.settings.decontaminate,
                           self.output().done)


def decontaminated_shard(folder: Path, shuffled_shard: Path) -> Path:
    return folder / f"{shard_stem(shuffled_shard)}.parquet"


class DecontaminateShard(RunTask):
    """Pass 2 on one shuffled shard: the selected n-grams cut out of its documents; beside the selection."""

    stage = "6-decontaminate"
    part = luigi.IntParameter(description="shuffled shard number")
    fanned_by = "part"
    reusable = True

    def fan_count(self) -> int:
        return Decontaminate(self.config).shard_count()

    def requires(self):
        return {"selected": DecontaminateSelect(self.config), "shuffled": shuffled(self.config),
                "counts": DecontaminateCount(self.config, self.part)}

    def own_folder(self) -> Path:
        return self.input_of("selected").folder

    def target(self) -> ShardTarget:
        shard = decontaminated_shard(self.folder(), self.input()["shuffled"].shards[self.part])
        return ShardTarget(shard, manifest_path(shard))

    def reuse_inputs(self) -> list[Path]:
        """The shard (its pass-1 counts follow from it and the settings)."""
        return [self.input()["shuffled"].local_shard(self.part)]

    def reuse_settings(self) -> tuple:
        """And the n-grams left out of the cut: a corpus that grows changes the selection's other figures each time,
        the n-grams seldom."""
        return *self.own_settings(), key_of(self.input()["selected"].record()["frequent"])

    def make(self):
        from textmill.pipeline.decontaminate import decontaminate_shard, read_matched, read_selected

        given, cfg = self.input(), self.settings.decontaminate
        chosen = read_selected(given["selected"].local(), cfg)
        decontaminate_shard(given["shuffled"].local_shard(self.part), self.output().shard, chosen, cfg,
                            self.settings.input.max_document_bytes, read_matched(given["counts"].local()))


class Decontaminate(PerShuffledShard):
    """The decontaminated corpus: done when every shard is (DecontaminateCount per shuffled shard, then
    DecontaminateSelect, then DecontaminateShard per shard, each a task of its own)."""

    stage = "6-decontaminate"

    def requires(self):
        return {"selected": DecontaminateSelect(self.config), "shuffled": shuffled(self.config)}

    def own_folder(self) -> Path:
        return self.input_of("selected").folder

    def shard_count(self) -> int | None:
        return finished_count(self.input()["shuffled"])

    def fan_out(self, count: int) -> list:
        return [DecontaminateShard(self.config, j) for j in range(count)]

    def target(self) -> ShardSet:
        folder = self.folder()
        return ShardSet(folder, record_path(folder, "task.json"),
                        [decontaminated_shard(folder, p) for p in self.input()["shuffled"].shards])

    def make(self):
        from textmill.pipeline.decontaminate import summary

        selected = self.input()["selected"].record()
        manifests = [shard.record() for shard in self.input_later()]
        self.finish(documents=sum(m["counts"]["kept"] for m in manifests), **summary(selected, manifests))


def corpus_task(config: str) -> Shuffle | Decontaminate:
    """The task whose shards are the finished documents: Decontaminate, or Shuffle when the run names no
    evaluation sets to decontaminate against."""
    return Decontaminate(config) if run_config(config).decontaminate.eval_files else Shuffle(config)
