"""The Luigi graph of a run: thin tasks over textmill.pipeline and textmill.tokenizers.

Every task takes the run's TOML file (`config`) and, for map stages, a shard number. Its output folder is
named by a key: a hash of the settings that change its output and of its inputs' keys, so changing a
cleanup setting gives cleanup and everything after it new folders (they run again) while the folders
before it are found complete. A shard task is complete when its manifest exists (written last); a
global task when its record (`.task.json`) does.

    BlacklistCheck(i) -> BlacklistDuplicates(p) -> BlacklistShard(i) -> ScrapeShard(i) -> SignatureShard(i)
      -> DedupBandKeys(i) -> DedupBand(b) -> DedupClusters -> DedupShard(i) -> CleanShard(i) -> [QualityShard(i)]
      -> ShuffleScatter(i) -> ShuffleGather(j) -> Shuffle -> DecontaminateCount(j) -> DecontaminateSelect
      -> DecontaminateShard(j) -> Decontaminate -> [TrainTokenizer] -> TokenizeShard(j) -> MergeDataset -> Corpus

A URL kept in an earlier list file is a duplicate in a later one (as `textmill blacklist` does): the
check is map/reduce (BlacklistCheck per file, BlacklistDuplicates per partition of the URL ids), and
BlacklistShard(i)'s key covers the files up to i: a list file added at the end leaves every earlier shard,
its scrape and its MinHash signatures as they are.

A stage command (`textmill dedup IN... -o OUT`) runs one stage's tasks of this same graph: its `config`
is the JSON file the command writes (RunConfig.command names the stage), GivenShard stands in for the
tasks before the stage, the stage's own folder is OUT (with a key record per task, since OUT is not
keyed), and its steps' folders lie in OUT/.textmill.

One module on purpose, though it is about 1,000 lines since the stages became map/reduce steps: the tasks
are the graph above, read top to bottom in stage order, each a few lines of key/requires/run; split up,
a reader would chase one chain across files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path

import luigi

from textmill.config import RunConfig, trainer_key
from textmill.errors import RunFailed, TextmillError
from textmill.io.files import file_fingerprint, local_fingerprint, read_json, read_json_record, write_json
from textmill.io.store import exists as store_exists
from textmill.io.store import fetch, fetch_tree, files_under, local_path, publish, publish_tree, remove, shown
from textmill.megatron.indexed import data_file_path, index_file_path
from textmill.pipeline.shards import manifest_path, record_path, shard_stem
from textmill.workflows.memos import BLACKLIST_KEYS, TASK_KEYS, listed_inputs, run_config


def key_of(*parts) -> str:
    """A short stable hash of JSON-able parts."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def url_stamps(settings: RunConfig) -> tuple:
    """The modification times of the [run] urls entries: a file added to a folder changes the folder's."""
    return tuple((str(p), p.stat().st_mtime_ns if p.exists() else None) for p in settings.run.urls)


def starts_with_url_lists(settings: RunConfig) -> bool:
    """Whether the graph's input files are URL lists (a run, or `textmill blacklist`), not shards a stage
    command was given."""
    return settings.command in (None, "blacklist")


def input_files(settings: RunConfig) -> tuple[Path, ...]:
    """The files the graph starts from, one shard each, in shard order: the URL lists of [run] urls (or the
    shards given to a stage command), listed again only when an entry changes (every task asks, so
    listing each time made the graph quadratic in the number of files)."""
    return listed_inputs(settings.run.urls, url_stamps(settings), starts_with_url_lists(settings))


def shard_name(settings: RunConfig, shard: int) -> str:
    """The name of shard `shard` in every stage: its URL list's name, or its given shard's."""
    from textmill.pipeline.blacklist import url_list_shard_name

    path = input_files(settings)[shard]
    return url_list_shard_name(path) if starts_with_url_lists(settings) else shard_stem(path)


# The folder of each corpus stage's output: where a stage command (`textmill dedup ... -o OUT`) writes
# straight into OUT; the steps before it (signatures, band keys, ...) go to OUT/.textmill/STAGE/KEY.
COMMAND_OUTPUT_STAGES = {"blacklist": "1-blacklist", "scrape": "2-scrape", "extract": "2-extract", "dedup": "3-dedup",
                         "clean": "4-clean", "quality": "4-quality", "shuffle": "5-shuffle",
                         "decontaminate": "6-decontaminate"}


class DoneFile(luigi.Target):
    """A task's done file (written last), where WORK is: on local disk, or in a store through its mirror."""

    def __init__(self, path: Path):
        self.path = path

    def exists(self) -> bool:
        """There and, for a JSON record, whole: a damaged one means the task runs again. (MinHash signatures
        and a blacklist partition are Parquet files, renamed or uploaded into place whole.)"""
        if self.path.suffix != ".json":
            return store_exists(self.path)
        return read_json_record(self.path, "its task will run again") is not None


def written_as(folder: Path, pattern: str, done: Path) -> list[Path]:
    """The files of one shard in `folder` and its hidden subfolders (those matching `pattern`: the shard,
    its rejects, its manifest): the shard first, its done file last."""
    found = [*folder.glob(pattern), *folder.glob(f".*/{pattern}")]
    return sorted(found, key=lambda p: (p == done, p.parent != folder, str(p)))


class RunTask(luigi.Task):
    """A task of the run described by `config` (a TOML file)."""

    config = luigi.Parameter(description="the run's TOML file")
    # Tries in one run of a task whose failure a retry may cure (a network fault, a killed process); a
    # deterministic failure is not retried (runner.FailFastWorker).
    retry_count = 2

    @property
    def settings(self) -> RunConfig:
        return run_config(self.config)

    @property
    def work(self) -> Path:
        return self.settings.run.work_dir

    def key(self) -> str:
        """The hash naming this task's output folder. Keys are chains (a dedup key holds every shard's
        scrape key), so each is computed once per configuration and list of URL files."""
        memo = (self.task_id, self.settings, url_stamps(self.settings))
        if memo not in TASK_KEYS:
            TASK_KEYS[memo] = self.own_key()
        return TASK_KEYS[memo]

    def own_key(self) -> str:
        raise NotImplementedError

    def folder(self) -> Path:
        if self.writes_command_output():
            return self.work
        steps = self.work / ".textmill" if self.settings.command else self.work
        return steps / self.stage / self.key()

    def writes_command_output(self) -> bool:
        """Whether this task writes into a stage command's output folder, which is not keyed: a key record
        says which inputs and settings the files there are from."""
        command = self.settings.command
        return command is not None and self.stage == COMMAND_OUTPUT_STAGES[command]

    def key_record(self) -> Path:
        return self.work / ".textmill" / "keys" / f"{self.command_task_id()}.json"

    def command_task_id(self) -> str:
        """The task's id but for its command file, whose path differs from machine to machine."""
        return luigi.task.task_id_str(self.task_family, {k: v for k, v in self.to_str_params().items() if k != "config"})

    def output(self):
        return DoneFile(self.done_file())

    def complete(self) -> bool:
        if not self.output().exists():
            return False
        if not self.writes_command_output():
            return True
        record = read_json_record(self.key_record(), "its task will run again")
        return record is not None and record.get("key") == self.key()

    def run(self):
        later = [t for t in self.requires_later() if not t.complete()]
        if later:
            yield later
        started = time.perf_counter()
        if self.writes_command_output():  # its files are rewritten: none counts as finished meanwhile
            remove(self.key_record())
        self.make()
        publish(self.written())
        if self.writes_command_output():
            files = [str(p.relative_to(self.work)) for p in self.written()]
            write_json({"task": self.command_task_id(), "key": self.key(), "files": files}, self.key_record())
            publish([self.key_record()])
        if self.settings.command:  # progress of a stage command, a line per finished step
            print(f"textmill {self.settings.command}: {self.shown()} done in {time.perf_counter() - started:.1f}s",
                  file=sys.stderr, flush=True)

    def shown(self) -> str:
        """The task as a person reads it: its class and parameters but the run file."""
        return f"{self.task_family}({', '.join(f'{k}={v}' for k, v in self.param_kwargs.items() if k != 'config')})"

    def requires_later(self) -> list:
        """Requirements known only once an earlier task has finished (those that depend on the shuffle's
        shard count): yielded by run, Luigi's dynamic dependencies."""
        return []

    def make(self) -> None:
        """The task's work, on local paths (its inputs fetched from the store when WORK is one)."""
        raise NotImplementedError

    def written(self) -> list[Path]:
        """The files the task writes, its done file last: the order they are published in."""
        return [self.done_file()]

    def done_file(self) -> Path:
        return record_path(self.folder(), "task.json")

    def finish(self, **result) -> None:
        write_json({"task": self.task_id, "key": self.key(), **result}, self.done_file())


class ShardTask(RunTask):
    shard = luigi.IntParameter(description="shard number (position of its input file, in sorted order)")

    def name(self) -> str:
        return shard_name(self.settings, self.shard)

    def shown(self) -> str:
        return f"{self.task_family}({self.name()})"

    def shard_file(self) -> Path:
        return self.folder() / f"{self.name()}.parquet"

    def done_file(self) -> Path:
        return manifest_path(self.shard_file())

    def written(self) -> list[Path]:
        return written_as(self.folder(), f"{self.name()}.*", self.done_file())

    def shard_bytes(self) -> int:
        return read_json(self.done_file()).get("bytes") or fetch(self.shard_file()).stat().st_size


class GivenShard(luigi.ExternalTask):
    """A shard given to a stage command, in the place of the task that writes it in a run."""

    config = luigi.Parameter(description="the stage command's file")
    shard = luigi.IntParameter(description="position of the input file, in sorted order")

    def shard_file(self) -> Path:
        return input_files(run_config(self.config))[self.shard]

    def key(self) -> str:
        return file_fingerprint(self.shard_file())["sha256"]

    def shard_bytes(self) -> int:
        return self.shard_file().stat().st_size

    def output(self):
        return luigi.LocalTarget(str(self.shard_file()))


def written_by(config: str, stage: str, task: ShardTask) -> ShardTask | GivenShard:
    """What writes the shard `stage` reads: `task` (of the stage before), or, when a command runs `stage`
    alone, the shard it was given."""
    return GivenShard(config, task.shard) if run_config(config).command == stage else task


def num_shards(settings: RunConfig) -> int:
    return len(input_files(settings))


# -- corpus stages ---------------------------------------------------------------------------------------
def url_rules(settings: RunConfig):
    from textmill.pipeline.blacklist import UrlRules

    return UrlRules.with_extra(settings.blacklist)


def blacklist_keys(settings: RunConfig, stamps: tuple) -> tuple[str, ...]:
    """The key of every blacklist shard: a chain over the URL files, since a shard's output depends on
    every file before it (computed in one pass; a task asking for its predecessor's key would recurse as
    deep as there are files)."""
    if (settings, stamps) not in BLACKLIST_KEYS:
        keys, previous, params = [], None, url_rules(settings).params()
        for path in input_files(settings):
            previous = key_of("blacklist", previous, path.name, file_fingerprint(path)["sha256"], params)
            keys.append(previous)
        BLACKLIST_KEYS[settings, stamps] = tuple(keys)
    return BLACKLIST_KEYS[settings, stamps]


class BlacklistCheck(ShardTask):
    """One URL list against the rules, and the ids that passed sorted by partition (map)."""

    stage = "1-blacklist-check"

    def own_key(self) -> str:
        path = input_files(self.settings)[self.shard]
        return key_of(file_fingerprint(path)["sha256"], url_rules(self.settings).params(),
                      self.settings.blacklist.duplicate_partitions)

    def shard_file(self) -> Path:
        return self.folder() / f"{self.name()}.checked.parquet"

    def done_file(self) -> Path:
        from textmill.pipeline.blacklist import checked_record

        return checked_record(self.shard_file())

    def make(self):
        from textmill.pipeline.blacklist import check_file

        check_file(input_files(self.settings)[self.shard], self.shard_file(), url_rules(self.settings),
                   self.settings.blacklist.duplicate_partitions)


class BlacklistDuplicates(RunTask):
    """The URLs of one partition already seen in an earlier list file (reduce): the first occurrence wins."""

    stage = "1-blacklist-duplicates"
    partition = luigi.IntParameter(description="partition of the URL ids")

    def own_key(self) -> str:
        return key_of([BlacklistCheck(self.config, i).key() for i in range(num_shards(self.settings))])

    def requires(self):
        return [BlacklistCheck(self.config, i) for i in range(num_shards(self.settings))]

    def done_file(self) -> Path:
        return self.folder() / f"part-{self.partition:05d}.parquet"

    def make(self):
        from textmill.pipeline.blacklist import find_duplicates, ids_path

        checked = [t.shard_file() for t in self.requires()]
        for path in checked:  # what find_duplicates reads: each file's passed ids and its record
            fetch(ids_path(path))
        find_duplicates(checked, self.partition, self.done_file())


class BlacklistShard(ShardTask):
    """One URL list's shard: what passed the rules and was not seen before it. Its key covers the list
    files up to it (blacklist_keys), so a file added at the end leaves it as it is."""

    stage = "1-blacklist"

    def own_key(self) -> str:
        return blacklist_keys(self.settings, url_stamps(self.settings))[self.shard]

    def requires(self):
        partitions = range(self.settings.blacklist.duplicate_partitions)
        return [BlacklistCheck(self.config, self.shard)] + [BlacklistDuplicates(self.config, p) for p in partitions]

    def make(self):
        from textmill.pipeline.blacklist import blacklist_shard

        check, *duplicates = self.requires()
        blacklist_shard(input_files(self.settings)[self.shard], fetch(check.shard_file()), self.shard,
                        [fetch(t.done_file()) for t in duplicates], self.shard_file(), url_rules(self.settings))


class ScrapeShard(ShardTask):
    stage = "2-scrape"

    def own_key(self) -> str:
        return key_of(self.requires().key(), self.settings.scrape.params())

    def requires(self):
        return written_by(self.config, "scrape", BlacklistShard(self.config, self.shard))

    def make(self):
        from textmill.pipeline.scrape import scrape_shard

        scrape_shard(fetch(self.requires().shard_file()), self.shard_file(), self.settings.scrape)


class ExtractShard(ShardTask):
    """A scraped shard extracted again from the HTML it kept, fetching nothing: `textmill extract` (a run
    scrapes again when [scrape] changes)."""

    stage = "2-extract"

    def own_key(self) -> str:
        from textmill.pipeline.shards import readable, sidecar_path

        given = self.requires().shard_file()
        return key_of(self.requires().key(), file_fingerprint(readable(sidecar_path(given, "html")))["sha256"],
                      self.settings.scrape.params())

    def requires(self):
        return written_by(self.config, "extract", ScrapeShard(self.config, self.shard))

    def make(self):
        from textmill.pipeline.scrape import extract_shard
        from textmill.pipeline.shards import readable, rejects_path, sidecar_path

        given = fetch(self.requires().shard_file())
        for sidecar in (rejects_path(given), sidecar_path(given, "html")):
            fetch(readable(sidecar))
        extract_shard(given, self.shard_file(), self.settings.scrape)


def scraped(config: str, shard: int) -> ScrapeShard | GivenShard:
    """The scraped shard dedup reads (given to `textmill dedup`)."""
    return written_by(config, "dedup", ScrapeShard(config, shard))


class SignatureShard(ShardTask):
    """MinHash signatures of one scraped shard; kept as long as the shard and the MinHash settings are."""

    stage = "3-minhash"

    def own_key(self) -> str:
        return key_of(self.requires().key(), self.settings.dedup.signature_params(), "words_hash")

    def requires(self):
        return scraped(self.config, self.shard)

    def done_file(self) -> Path:
        return self.folder() / f"{self.name()}.minhash.parquet"

    def make(self):
        from textmill.pipeline.dedup import signature_shard

        signature_shard(fetch(self.requires().shard_file()), self.done_file(), self.settings.dedup)


class DedupBandKeys(ShardTask):
    """One shard's LSH band keys (and id key), each band sorted, for the per-band merges."""

    stage = "3-lsh"

    def own_key(self) -> str:
        return key_of(SignatureShard(self.config, self.shard).key(), self.settings.dedup.bands,
                      self.settings.dedup.exact_duplicates)

    def requires(self):
        return SignatureShard(self.config, self.shard)

    def shard_file(self) -> Path:
        return self.folder() / f"{self.name()}.bands.parquet"

    def done_file(self) -> Path:
        from textmill.pipeline.dedup import bands_record

        return bands_record(self.shard_file())

    def make(self):
        from textmill.pipeline.dedup import band_keys_shard

        band_keys_shard(fetch(SignatureShard(self.config, self.shard).done_file()), self.shard_file(), self.settings.dedup)


class DedupBand(RunTask):
    """The candidate pairs of one LSH band (band number `bands`: documents with the same id; `bands + 1`:
    with the same words hash), from a merge of every shard's sorted keys; its file lies in the clusters'
    folder."""

    stage = "3-dedup"
    band = luigi.IntParameter(description="LSH band number")

    def own_key(self) -> str:
        return DedupClusters(self.config).key()

    def requires(self):
        return [DedupBandKeys(self.config, i) for i in range(num_shards(self.settings))]

    def done_file(self) -> Path:
        return record_path(self.folder(), "pairs") / f"band-{self.band:03d}.parquet"

    def make(self):
        from textmill.pipeline.dedup import band_pairs, write_pairs

        for task in self.requires():  # the band keys and their record
            fetch(task.shard_file())
            fetch(task.done_file())
        write_pairs(band_pairs([t.shard_file() for t in self.requires()], self.band), self.done_file())


class DedupClusters(RunTask):
    """Near-duplicate clusters over the whole corpus: every band's candidate pairs, confirmed and joined."""

    stage = "3-dedup"

    def own_key(self) -> str:
        shards = [scraped(self.config, i).key() for i in range(num_shards(self.settings))]
        return key_of(shards, self.settings.dedup.params())

    def requires(self):
        dedup = self.settings.dedup
        return [DedupBand(self.config, b) for b in range(dedup.bands + 1 + dedup.exact_duplicates)]

    def clusters_file(self) -> Path:
        return record_path(self.folder(), "clusters.json")

    def make(self):
        from textmill.pipeline.dedup import cluster_pairs, write_clusters

        n = num_shards(self.settings)
        pairs = [fetch(t.done_file()) for t in self.requires()]
        counts = [read_json(DedupBandKeys(self.config, i).done_file())["rows"] for i in range(n)]
        signatures = [fetch(SignatureShard(self.config, i).done_file()) for i in range(n)]
        bands = self.settings.dedup.bands
        clusters = cluster_pairs(pairs[:bands], pairs[bands : bands + 1], pairs[bands + 1 :], signatures, counts,
                                 self.settings.dedup)
        write_clusters(clusters, self.settings.dedup, self.clusters_file())
        self.finish(**{k: v for k, v in clusters.items() if k not in ("duplicates", "exact")})

    def written(self) -> list[Path]:
        return [self.clusters_file(), self.done_file()]


class DedupShard(ShardTask):
    stage = "3-dedup"

    def own_key(self) -> str:
        return DedupClusters(self.config).key()

    def requires(self):
        return [DedupClusters(self.config), scraped(self.config, self.shard)]

    def make(self):
        from textmill.pipeline.dedup import filter_shard

        clusters = read_json(DedupClusters(self.config).clusters_file())
        shard = fetch(scraped(self.config, self.shard).shard_file())
        filter_shard(shard, self.shard_file(), clusters["duplicates"], set(clusters.get("exact", ())), self.settings.dedup,
                     [shard])


class CleanShard(ShardTask):
    stage = "4-clean"

    def own_key(self) -> str:
        t = self.settings.tokenize.given_tokenizer()
        counted_by = [file_fingerprint(p)["sha256"] for p in t.files] if t else "approx"
        return key_of(self.requires().key(), self.settings.clean.params(), counted_by)

    def requires(self):
        return written_by(self.config, "clean", DedupShard(self.config, self.shard))

    def make(self):
        from textmill.pipeline.clean import clean_shard

        clean_shard(fetch(self.requires().shard_file()), self.shard_file(), self.settings.clean,
                    self.settings.tokenize.given_tokenizer())


class QualityShard(ShardTask):
    """The quality filters of [quality] preset over one cleaned shard (only when the preset is not none)."""

    stage = "4-quality"

    def own_key(self) -> str:
        return key_of(self.requires().key(), self.settings.quality.params())

    def requires(self):
        return written_by(self.config, "quality", CleanShard(self.config, self.shard))

    def make(self):
        from textmill.pipeline.quality import quality_shard

        quality_shard(fetch(self.requires().shard_file()), self.shard_file(), self.settings.quality)


def shuffle_shard_count(config: str) -> int | None:
    """How many shards the shuffle writes: [shuffle] num_shards, or when that is 0 what ShufflePlan chose
    from the cleaned corpus's size (None until it has); for `textmill decontaminate`, how many it was given."""
    settings = run_config(config)
    if settings.command == "decontaminate":
        return num_shards(settings)
    if settings.shuffle.num_shards:
        return settings.shuffle.num_shards
    plan = read_json_record(ShufflePlan(config).done_file(), "the shuffle is planned again")
    return plan and plan["num_shards"]


def shuffle_key_params(settings: RunConfig) -> tuple:
    """What of [shuffle] names the shuffle's folders: the shard count, or the size it is derived from."""
    count = settings.shuffle.num_shards or ("target_shard_mb", settings.shuffle.target_shard_mb)
    return count, settings.run.seed


def cleaned(config: str, shard: int) -> CleanShard | QualityShard | GivenShard:
    """The cleaned shard the shuffle reads: cleanup's, or the quality filters' when [quality] has a preset
    (given to `textmill shuffle`)."""
    filtered = run_config(config).quality.preset != "none"
    return written_by(config, "shuffle", (QualityShard if filtered else CleanShard)(config, shard))


class ShufflePlan(RunTask):
    """With [shuffle] num_shards = 0: the shard count, from the cleaned shards' sizes and target_shard_mb.
    The tasks after it that need the count find it here (and, asked before it is known, wait for it)."""

    stage = "5-shuffle"

    def own_key(self) -> str:
        return Shuffle(self.config).key()

    def requires(self):
        return [cleaned(self.config, i) for i in range(num_shards(self.settings))]

    def done_file(self) -> Path:
        return record_path(self.folder(), "plan.json")

    def make(self):
        from textmill.pipeline.shuffle import shard_count

        size = sum(t.shard_bytes() for t in self.requires())
        write_json({"input_bytes": size, "target_shard_mb": self.settings.shuffle.target_shard_mb,
                    "num_shards": shard_count(size, self.settings.shuffle.target_shard_mb)}, self.done_file())


class PerShuffledShard:
    """A task that needs one task per shuffled shard (`fan_out(count)`). While ShufflePlan has not chosen the
    count, it requires `until_planned()` instead, and its run yields the fan-out once the count is known
    (Luigi's dynamic dependencies)."""

    def fan_out(self, count: int) -> list:
        raise NotImplementedError

    def until_planned(self) -> list:
        raise NotImplementedError

    def requires(self):
        count = shuffle_shard_count(self.config)
        return self.fan_out(count) if count is not None else self.until_planned()

    def requires_later(self) -> list:
        return self.fan_out(shuffle_shard_count(self.config))


class ShuffleScatter(ShardTask):
    """One cleaned shard's documents sorted by the output shard of the shuffle their id hashes to."""

    stage = "5-shuffle-scatter"

    def own_key(self) -> str:
        return key_of(cleaned(self.config, self.shard).key(), *shuffle_key_params(self.settings))

    def requires(self):
        if self.settings.shuffle.num_shards:
            return cleaned(self.config, self.shard)
        return [cleaned(self.config, self.shard), ShufflePlan(self.config)]

    def done_file(self) -> Path:
        from textmill.pipeline.shuffle import scatter_record

        return scatter_record(self.shard_file())

    def make(self):
        from textmill.pipeline.shuffle import scatter_shard

        scatter_shard(fetch(cleaned(self.config, self.shard).shard_file()), self.shard_file(),
                      shuffle_shard_count(self.config), self.settings.run.seed)


class ShuffleGather(RunTask):
    """One output shard of the shuffle: its bucket of every scattered shard, permuted."""

    stage = "5-shuffle"
    bucket = luigi.IntParameter(description="output shard number")

    def own_key(self) -> str:
        return Shuffle(self.config).key()  # its shard lies in the shuffle's folder

    def requires(self):
        return [ShuffleScatter(self.config, i) for i in range(num_shards(self.settings))]

    def done_file(self) -> Path:
        return manifest_path(self.shard())

    def make(self):
        from textmill.pipeline.shuffle import gather_bucket, scatter_record

        scattered = [ShuffleScatter(self.config, i).shard_file() for i in range(num_shards(self.settings))]
        for path in scattered:  # the records; gather_bucket reads only this bucket's row group of each shard
            fetch(scatter_record(path))
        gather_bucket(scattered, self.bucket, self.shard(), shuffle_shard_count(self.config), self.settings.run.seed)

    def shard(self) -> Path:
        return Shuffle(self.config).shard(self.bucket)

    def written(self) -> list[Path]:
        return written_as(self.shard().parent, f"{self.shard().stem}.*", self.done_file())


class Shuffle(PerShuffledShard, RunTask):
    """The shuffled corpus: done when every output shard is (ShuffleScatter per cleaned shard, then
    ShuffleGather per output shard, each a task of its own)."""

    stage = "5-shuffle"

    def own_key(self) -> str:
        shards = [cleaned(self.config, i).key() for i in range(num_shards(self.settings))]
        return key_of(shards, *shuffle_key_params(self.settings))

    def fan_out(self, count: int) -> list:
        return [ShuffleGather(self.config, b) for b in range(count)]

    def until_planned(self) -> list:
        return [ShufflePlan(self.config)]

    def shard(self, bucket: int) -> Path:
        return self.folder() / f"part-{bucket:05d}.parquet"

    def shards(self) -> list[Path]:
        return [self.shard(b) for b in range(shuffle_shard_count(self.config))]

    def make(self):
        from textmill.pipeline.shuffle import empty_shards_note

        manifests = [read_json(manifest_path(shard)) for shard in self.shards()]
        note = empty_shards_note(manifests)
        if note:
            print(f"textmill: {note}", file=sys.stderr)
        self.finish(documents=sum(m["counts"]["kept"] for m in manifests), shards=len(manifests), note=note)


class GivenShards(luigi.WrapperTask):
    """The shards given to `textmill decontaminate`, in the place of the shuffled corpus."""

    config = luigi.Parameter(description="the stage command's file")

    def requires(self):
        return [GivenShard(self.config, i) for i in range(num_shards(run_config(self.config)))]

    def key(self) -> str:
        return key_of([t.key() for t in self.requires()])

    def shard(self, part: int) -> Path:
        return GivenShard(self.config, part).shard_file()


def shuffled(config: str) -> Shuffle | GivenShards:
    """The shuffled corpus decontamination reads (given to `textmill decontaminate`)."""
    return GivenShards(config) if run_config(config).command == "decontaminate" else Shuffle(config)


class DecontaminateStep(RunTask):
    """A step of the decontamination; its files lie in the Decontaminate task's folder."""

    stage = "6-decontaminate"

    def own_key(self) -> str:
        return Decontaminate(self.config).key()

    def input_shard(self, part: int) -> Path:
        return shuffled(self.config).shard(part)


class DecontaminateCount(DecontaminateStep):
    """Pass 1 on one shuffled shard: how often each evaluation n-gram occurs in it."""

    part = luigi.IntParameter(description="shuffled shard number")

    def requires(self):
        return shuffled(self.config)

    def done_file(self) -> Path:
        return record_path(self.folder(), "counts") / f"{self.input_shard(self.part).stem}.counts.json"

    def make(self):
        from textmill.pipeline.decontaminate import count_matches, eval_ngrams, write_counts

        cfg = self.settings.decontaminate
        write_counts(count_matches(fetch(self.input_shard(self.part)), eval_ngrams(cfg.eval_files, cfg), cfg.max_ngram),
                     self.done_file())


class DecontaminateSelect(PerShuffledShard, DecontaminateStep):
    """The n-grams pass 2 cuts: the counts of every shard added up, those seen fewer than key_threshold times."""

    def fan_out(self, count: int) -> list:
        return [DecontaminateCount(self.config, j) for j in range(count)]

    def until_planned(self) -> list:
        return [shuffled(self.config)]

    def done_file(self) -> Path:
        return record_path(self.folder(), "selected.json")

    def make(self):
        from textmill.pipeline.decontaminate import select_from_counts

        counts = [fetch(t.done_file()) for t in self.requires_later()]
        select_from_counts(counts, self.settings.decontaminate, self.done_file())


class DecontaminateShard(DecontaminateStep):
    """Pass 2 on one shuffled shard: the selected n-grams cut out of its documents."""

    part = luigi.IntParameter(description="shuffled shard number")

    def requires(self):
        return DecontaminateSelect(self.config)

    def done_file(self) -> Path:
        return manifest_path(self.shard())

    def make(self):
        from textmill.pipeline.decontaminate import decontaminate_shard, read_selected

        chosen = read_selected(fetch(DecontaminateSelect(self.config).done_file()), self.settings.decontaminate)
        decontaminate_shard(fetch(self.input_shard(self.part)), self.shard(), chosen, self.settings.decontaminate)

    def shard(self) -> Path:
        return Decontaminate(self.config).shard(self.part)

    def written(self) -> list[Path]:
        return written_as(self.shard().parent, f"{self.shard().stem}.*", self.done_file())


class Decontaminate(PerShuffledShard, RunTask):
    """The decontaminated corpus: done when every shard is (DecontaminateCount per shuffled shard, then
    DecontaminateSelect, then DecontaminateShard per shard, each a task of its own)."""

    stage = "6-decontaminate"

    def own_key(self) -> str:
        evals = [file_fingerprint(p)["sha256"] for p in self.settings.decontaminate.eval_files]
        return key_of(shuffled(self.config).key(), evals, self.settings.decontaminate.params())

    def fan_out(self, count: int) -> list:
        return [DecontaminateShard(self.config, j) for j in range(count)]

    def until_planned(self) -> list:
        return [DecontaminateSelect(self.config)]

    def shard(self, part: int) -> Path:
        return self.folder() / f"{shuffled(self.config).shard(part).stem}.parquet"

    def shards(self) -> list[Path]:
        return [self.shard(j) for j in range(shuffle_shard_count(self.config))]

    def make(self):
        from textmill.pipeline.decontaminate import summary

        selected = read_json(DecontaminateSelect(self.config).done_file())
        manifests = [read_json(manifest_path(shard)) for shard in self.shards()]
        self.finish(documents=sum(m["counts"]["kept"] for m in manifests), **summary(selected, manifests))


def corpus_task(config: str) -> Shuffle | Decontaminate:
    """The task whose shards are the finished documents: Decontaminate, or Shuffle when the run names no
    evaluation sets to decontaminate against."""
    return Decontaminate(config) if run_config(config).decontaminate.eval_files else Shuffle(config)


class TrainTokenizer(RunTask):
    """A byte-level BPE trained on the finished corpus, when the config names no vocabulary."""

    stage = "7-tokenizer"

    def own_key(self) -> str:
        t = self.settings.tokenize
        return key_of(corpus_task(self.config).key(), t.vocab_size, t.min_frequency, t.bpe_sample_documents,
                      t.bpe_sample_seed)

    def requires(self):
        return corpus_task(self.config)

    def prefix(self) -> Path:
        return self.folder() / "bpe"

    def make(self):
        from textmill.tokenizers.train import train_bpe_on_files

        shards = [fetch(p) for p in corpus_task(self.config).shards()]
        tokenizer = train_bpe_on_files(shards, self.prefix(), self.settings.tokenize)
        self.finish(vocab_size=tokenizer.vocab_size, vocab_file=shown(tokenizer.files[0]), merge_file=shown(tokenizer.files[1]))

    def written(self) -> list[Path]:
        return [*tokenizer_files(self.config, self.settings), self.done_file()]


def tokenizer_files(config: str, settings: RunConfig) -> tuple[Path, ...]:
    """The files of the run's tokenizer: GPT-2's vocab.json and merges.txt ([tokenize] vocab_file, or the BPE
    it trains), or those of the model [train] init_from imports (its tokenizer.json, ...)."""
    if settings.train.init_from:
        return ImportHF(config).tokenizer_files()
    if settings.tokenize.vocab_file:
        return settings.tokenize.vocab_file, settings.tokenize.merge_file
    prefix = TrainTokenizer(config).prefix()
    return Path(f"{prefix}-vocab.json"), Path(f"{prefix}-merges.txt")


def tokenizer_key(config: str, settings: RunConfig) -> str:
    if settings.train.init_from:
        return ImportHF(config).key()
    if settings.tokenize.vocab_file:
        return key_of([file_fingerprint(p)["sha256"] for p in (settings.tokenize.vocab_file, settings.tokenize.merge_file)])
    return TrainTokenizer(config).key()


def tokenizer_source(config: str, settings: RunConfig) -> list:
    """The task that makes the run's tokenizer files, if one does."""
    if settings.train.init_from:
        return [ImportHF(config)]
    return [] if settings.tokenize.vocab_file else [TrainTokenizer(config)]


def tokenizer_options(files: list[Path]) -> list[str]:
    """`textmill train`'s options for a tokenizer's files (fetched)."""
    from textmill.tokenizers.files import tokenizer_settings

    return [arg for name, value in tokenizer_settings(files).items() for arg in ("--" + name.replace("_", "-"), str(value))]


class ImportHF(RunTask):
    """[train] init_from's Hugging Face model as a release checkpoint, with its tokenizer beside it."""

    stage = "7-import"

    def source(self) -> Path:
        return self.settings.train.hf_folder(self.settings.path.parent)

    def own_key(self) -> str:
        files = sorted(p for p in self.source().iterdir() if p.is_file() and not p.name.startswith("."))
        return key_of([(p.name, file_fingerprint(p)["sha256"]) for p in files])

    def checkpoints(self) -> Path:
        return self.folder() / "ckpt"

    def tokenizer_files(self) -> tuple[Path, ...]:
        """Where the import keeps the model's tokenizer: its Hugging Face files, or GPT-2's two."""
        from textmill.tokenizers.hf import TOKENIZER_FILES, is_hf_tokenizer_folder

        kept = self.checkpoints() / "tokenizer"
        if is_hf_tokenizer_folder(self.source()):
            return tuple(kept / name for name in TOKENIZER_FILES if (self.source() / name).is_file())
        return kept / "vocab.json", kept / "merges.txt"

    def make(self):
        from textmill.interop.hf import import_hf

        imported = import_hf(self.source(), self.checkpoints())
        self.finish(**{k: v for k, v in imported.items() if k != "output"}, checkpoints=shown(self.checkpoints()))

    def written(self) -> list[Path]:
        publish_tree(self.checkpoints())
        return [self.done_file()]


class TokenizeShard(RunTask):
    stage = "8-tokenize"
    part = luigi.IntParameter(description="shard number after the shuffle")

    def own_key(self) -> str:
        return key_of(corpus_task(self.config).key(), tokenizer_key(self.config, self.settings), self.settings.tokenize.append_eod)

    def requires(self):
        return [corpus_task(self.config), *tokenizer_source(self.config, self.settings)]

    def prefix(self) -> Path:
        return self.folder() / f"part-{self.part:05d}"

    def dataset(self) -> Path:
        from textmill.tokenizers.preprocess import dataset_prefix

        return dataset_prefix(self.prefix(), "text")

    def done_file(self) -> Path:
        from textmill.tokenizers.preprocess import manifest_file

        return manifest_file(self.prefix())

    def written(self) -> list[Path]:
        return written_as(self.folder(), f"{self.prefix().name}[._]*", self.done_file())

    def make(self):
        from textmill.tokenizers.config import TokenizeConfig
        from textmill.tokenizers.files import tokenizer_settings
        from textmill.tokenizers.preprocess import tokenize_files

        files = [fetch(p) for p in tokenizer_files(self.config, self.settings)]
        tokenizer = TokenizeConfig(**tokenizer_settings(files)).given_tokenizer()
        tokenize_files([fetch(corpus_task(self.config).shard(self.part))], self.prefix(), tokenizer,
                       dataclasses.replace(self.settings.tokenize, workers=1))


class MergeDataset(PerShuffledShard, RunTask):
    """The token files of every shard concatenated in shard order: the training set (Megatron's
    tools/merge_datasets.py)."""

    stage = "9-dataset"

    def own_key(self) -> str:
        return TokenizeShard(self.config, 0).key()

    def fan_out(self, count: int) -> list:
        return [TokenizeShard(self.config, j) for j in range(count)]

    def until_planned(self) -> list:
        return [corpus_task(self.config)]

    def dataset(self) -> Path:
        return self.folder() / "corpus_text_document"

    def make(self):
        from textmill.megatron.indexed import merge_datasets

        started = time.perf_counter()
        parts = [t.dataset() for t in self.requires_later()]
        for prefix in parts:
            fetch(data_file_path(prefix))
            fetch(index_file_path(prefix))
        merged = merge_datasets(parts, self.dataset())
        files = tokenizer_files(self.config, self.settings)
        self.finish(dataset=shown(self.dataset()), documents=merged.num_documents, tokens=int(merged.lengths.sum()),
                    tokenizer_files=[shown(p) for p in files], seconds=time.perf_counter() - started,
                    files={p.name: local_fingerprint(p) for p in self.token_files()})

    def token_files(self) -> list[Path]:
        return [data_file_path(self.dataset()), index_file_path(self.dataset())]

    def written(self) -> list[Path]:
        return [*self.token_files(), self.done_file()]

    def staged(self) -> list[str]:
        """The trainer's options naming the merged token files and their tokenizer, local (fetched when WORK
        is in a store), each token file checked against the size and sha256 recorded when it was written."""
        merged = read_json(self.done_file())
        names = merged.get("tokenizer_files") or [merged["vocab_file"], merged["merge_file"]]  # (as 0.1 wrote it)
        tokenizer = tokenizer_options([fetch(local_path(name)) for name in names])
        for path in self.token_files():
            fetch(path)
            expected = merged.get("files", {}).get(path.name)
            if expected and {k: v for k, v in file_fingerprint(path).items() if k != "path"} != \
                    {k: v for k, v in expected.items() if k != "path"}:
                raise RunFailed(f"{shown(path)} is not the file MergeDataset wrote (size or sha256 differ); "
                                "delete that folder to merge again")
        return ["--data-path", str(self.dataset()), *tokenizer]


class Corpus(luigi.WrapperTask):
    """Everything up to the merged token files."""

    config = luigi.Parameter(description="the run's TOML file")

    def requires(self):
        return MergeDataset(self.config)


# -- model stages ----------------------------------------------------------------------------------------
class TrainGPT(RunTask):
    """`textmill train` on the merged token files, as a subprocess (under torchrun with nproc_per_node > 1)
    whose log is streamed to this process's output and to train.log. A run killed part-way resumes from
    its newest checkpoint, which gives the same result as an uninterrupted one.

    With [train] resume = "latest" the model starts from the weights of the newest model trained on
    another corpus with the same vocabulary (a retrain on a grown corpus); that model's key is part of
    this one's, so the same corpus is not trained again the next day."""

    stage = "10-train"

    def own_key(self) -> str:
        start = self.start_from()
        imported = ImportHF(self.config).key() if self.settings.train.init_from else None
        return key_of(MergeDataset(self.config).key(), trainer_key(self.settings.trainer), start and start["key"],
                      *([imported] if imported else []))

    def start_from(self) -> dict | None:
        """The record (.task.json) of the model this one starts from, or None to start from scratch."""
        if self.settings.train.resume != "latest":
            return None
        dataset, vocabulary = MergeDataset(self.config).key(), tokenizer_key(self.config, self.settings)
        earlier = [read_json(p) for p in files_under(self.work / self.stage) if p == record_path(p.parent, "task.json")]
        earlier = [e for e in earlier if e.get("dataset_key") != dataset and e.get("tokenizer_key") == vocabulary]
        return max(earlier, key=lambda e: e["finished"], default=None)

    def requires(self):
        return MergeDataset(self.config)

    def checkpoints(self) -> Path:
        return self.folder() / "ckpt"

    def trained(self) -> Path:
        """The checkpoints folder, local (fetched with the tokenizer they name when WORK is in a store)."""
        for path in tokenizer_files(self.config, self.settings):
            fetch(path)
        return fetch_tree(self.checkpoints())

    def make(self):
        import subprocess
        import sys

        from textmill.trainer.checkpoint import TRACKER
        from textmill.trainer.metrics import read_metrics

        dataset = MergeDataset(self.config).staged()
        start = self.start_from()
        load = ["--load", str(fetch_tree(self.checkpoints()))]  # a run killed part-way resumes
        if start and not (self.checkpoints() / TRACKER).exists():  # not yet begun: start from the earlier model
            load = ["--load", str(fetch_tree(local_path(start["checkpoints"]))), "--finetune"]
        if self.settings.train.init_from:  # the imported model, its shape with it, until a checkpoint of our own
            begun = (self.checkpoints() / TRACKER).exists()
            load = [*load, "--use-checkpoint-args"] if begun else \
                ["--load", str(fetch_tree(ImportHF(self.config).checkpoints())), "--finetune", "--use-checkpoint-args"]
        command = [sys.executable, "-m", "textmill.cli", "train", *dataset, "--save", str(self.checkpoints()), *load,
                   "--nproc-per-node", str(self.settings.trainer.nproc_per_node), *self.settings.train_options]
        self.folder().mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        cause = ""  # the first error line of the trainer (of any of its processes under torchrun)
        with open(self.folder() / "train.log", "a", encoding="utf-8") as log:
            log.write("$ " + " ".join(command) + "\n")
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
            for line in proc.stdout:
                print(line, end="", flush=True)
                log.write(line)
                if not cause and line.startswith("textmill: error: "):
                    cause = line.strip().removeprefix("textmill: error: ")
            code = proc.wait()
        if code == 2:  # bad settings or input, which a retry would not change
            raise TextmillError(f"textmill train: {cause}")
        if code != 0:
            raise RunFailed(f"textmill train exited with status {code}: {cause or 'no error line'} (log: "
                            f"{self.folder() / 'train.log'})")
        records = read_metrics(self.checkpoints())
        valid = [r for r in records if "valid_loss" in r]
        self.finish(iterations=records[-1]["iteration"], lm_loss=records[-1].get("lm_loss"),
                    valid_loss=valid[-1]["valid_loss"] if valid else None, checkpoints=shown(self.checkpoints()),
                    started_from=start and start["checkpoints"], dataset_key=MergeDataset(self.config).key(),
                    tokenizer_key=tokenizer_key(self.config, self.settings), finished=time.time(),
                    seconds=time.perf_counter() - started)

    def written(self) -> list[Path]:
        publish_tree(self.checkpoints())
        return [self.folder() / "train.log", self.done_file()]


class EvaluateLambada(RunTask):
    """LAMBADA-format accuracy and perplexity of the trained model on each file of [evaluate] lambada."""

    stage = "11-evaluate"

    def own_key(self) -> str:
        files = [file_fingerprint(p)["sha256"] for p in self.settings.evaluate.lambada]
        return key_of(TrainGPT(self.config).key(), files, self.settings.evaluate.strict)

    def requires(self):
        return TrainGPT(self.config)

    def make(self):
        from textmill.evaluate.lambada import evaluate_lambada

        checkpoints, strict = TrainGPT(self.config).trained(), self.settings.evaluate.strict
        self.finish(results=[evaluate_lambada(checkpoints, path, strict, output=output, progress=True)
                             for path, output in zip(self.settings.evaluate.lambada, self.outputs())])

    def outputs(self) -> list[Path]:
        return [self.folder() / f"lambada-{i}-{p.stem}.json" for i, p in enumerate(self.settings.evaluate.lambada)]

    def written(self) -> list[Path]:
        return [*self.outputs(), self.done_file()]


class ExportHF(RunTask):
    stage = "12-export"

    def own_key(self) -> str:
        return TrainGPT(self.config).key()

    def requires(self):
        return TrainGPT(self.config)

    def hf_folder(self) -> Path:
        return self.folder() / "hf"

    def make(self):
        from textmill.interop.hf import export_hf

        self.finish(**{**export_hf(TrainGPT(self.config).trained(), self.hf_folder()), "output": shown(self.hf_folder())})

    def written(self) -> list[Path]:
        publish_tree(self.hf_folder())
        return [self.done_file()]


class EndToEnd(luigi.WrapperTask):
    """The whole run: the corpus, and (when [train] is enabled) the trained model, its evaluation and its
    Hugging Face export."""

    config = luigi.Parameter(description="the run's TOML file")

    def requires(self):
        settings = run_config(self.config)
        tasks = [Corpus(self.config)]
        if settings.train.enabled:
            tasks.append(TrainGPT(self.config))
            if settings.evaluate.lambada:
                tasks.append(EvaluateLambada(self.config))
            if settings.export.hf:
                tasks.append(ExportHF(self.config))
        return tasks
