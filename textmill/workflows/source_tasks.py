"""The tasks where a run starts when it starts before the URL lists, or without them (workflows/sources.py says
which): RedditLinks, a URL list per Reddit submission dump, built before the rest of the graph, whose units depend
on those lists; and WarcShard, a unit of a web archive's pages, which takes the scrape's place before dedup."""

from __future__ import annotations

from pathlib import Path

import luigi

from textmill.io.store import fetch
from textmill.pipeline.shards import manifest_path
from textmill.workflows.framework import GivenFile, RunTask, ShardTask
from textmill.workflows.memos import run_config
from textmill.workflows.sources import REDDIT_STAGE, dump_files, given_dumps, reddit_key
from textmill.workflows.targets import ShardTarget


class WarcShard(ShardTask):
    """One unit of a web archive's pages, extracted as the scrape extracts them (a run from [run] warcs)."""

    stage = "2-warc"
    libraries = (*RunTask.libraries, "textmill.pipeline.warc")

    def requires(self):
        return GivenFile(self.config, self.shard)

    def own_settings(self) -> tuple:
        from textmill.pipeline.warc import extraction_params

        return (extraction_params(self.settings.scrape),)

    def make(self):
        from textmill.pipeline.warc import warc_shard

        given = self.input()
        given.local()
        warc_shard(given.unit, self.output().shard, self.settings.scrape)


class RedditLinks(RunTask):
    """The links of one submission dump by [reddit]'s rules: a JSON-lines URL list, its rejects and manifest."""

    stage = REDDIT_STAGE
    dump = luigi.IntParameter(description="position of the dump, in order")
    fanned_by = "dump"

    def fan_count(self) -> int:
        return len(dump_files(self.settings))

    def path(self) -> Path:
        return dump_files(self.settings)[self.dump]

    def own_key(self) -> str:
        return reddit_key(self.settings, self.path())

    def target(self) -> ShardTarget:
        from textmill.pipeline.reddit import dump_name

        shard = self.folder() / f"{dump_name(self.path())}.jsonl"
        return ShardTarget(shard, manifest_path(shard))

    def make(self):
        from textmill.pipeline.reddit import reddit_links

        reddit_links(fetch(self.path()), self.output().shard, self.settings.reddit)

    def shown(self) -> str:
        return f"{self.task_family}({self.path().name})"


def source_tasks(config: str) -> list[RedditLinks]:
    """The tasks that write the run's URL lists before its graph can be known (none for a run from [run] urls)."""
    settings = run_config(config)
    return [RedditLinks(config, d) for d in range(len(dump_files(settings)))] if given_dumps(settings) else []


def sources_finished(config: str) -> bool:
    """Whether the run's URL lists are all there (so its graph can be known), made current on this machine."""
    sources = source_tasks(config)
    if not all(task.complete() for task in sources):
        return False
    for task in sources:
        task.output().local()
    return True
