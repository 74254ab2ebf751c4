"""Where a run starts: URL lists ([run] urls), Reddit submission dumps ([run] reddit_dumps: the URL lists their links
make, which corpus_tasks.RedditLinks writes, WORK/0-reddit/KEY/NAME.jsonl), or web archives ([run] warcs: WARC
files, whose pages the graph reads with no URL list and no fetch).

How many units the blacklist has depends on how many links the dumps give, so the graph after the lists is known
only once they are written: a run builds the RedditLinks tasks first, then the graph from their lists
(runner.build_and_record). A dump is known by its name, size and modification time (in a store, by its version),
not by its bytes, so that no process reads tens of GB to name a folder: a published month does not change. Each
list's units are keyed by their own bytes, as any list's.
"""

from __future__ import annotations

import functools
from pathlib import Path

from textmill.io.files import given_files, unique_names
from textmill.io.store import version_stamp
from textmill.run_file import RunConfig
from textmill.workflows.memos import REDDIT_LISTS, key_of

DUMP_SUFFIXES = (".zst", ".gz", ".bz2", ".xz", ".jsonl", ".json", ".ndjson")
REDDIT_STAGE = "0-reddit"


def given_dumps(settings: RunConfig) -> tuple[Path, ...]:
    """The dumps a run starts from ([run] reddit_dumps), or those given to `textmill reddit-urls`."""
    return settings.run.urls if settings.command == "reddit-urls" else settings.run.reddit_dumps


def dump_files(settings: RunConfig) -> tuple[Path, ...]:
    """The dump files, in order: files as given, and the dumps inside given folders, sorted by name."""
    return _dump_files(given_dumps(settings), tuple(_stamp(p) for p in given_dumps(settings)))


def _stamp(path: Path) -> tuple | None:
    return (path.stat().st_mtime_ns, path.stat().st_ctime_ns) if path.exists() else None


@functools.lru_cache(maxsize=8)
def _dump_files(given: tuple[Path, ...], stamps: tuple) -> tuple[Path, ...]:
    from textmill.pipeline.reddit import dump_name

    files = given_files(given, DUMP_SUFFIXES, "submission dumps")
    return tuple(unique_names(files, dump_name, "dumps"))


def reddit_key(settings: RunConfig, dump: Path) -> str:
    return key_of(dump.name, version_stamp(dump), settings.reddit.params())


def reddit_lists(settings: RunConfig) -> tuple[Path, ...]:
    """The URL lists of a run that starts from dumps: one per dump, where RedditLinks writes it (worked out once
    per process and settings: every task's key asks)."""
    from textmill.pipeline.reddit import dump_name

    if settings not in REDDIT_LISTS:
        REDDIT_LISTS[settings] = tuple(settings.run.work_dir / REDDIT_STAGE / reddit_key(settings, dump) /
                                       f"{dump_name(dump)}.jsonl" for dump in dump_files(settings))
    return REDDIT_LISTS[settings]


def graph_inputs(settings: RunConfig) -> tuple[Path, ...]:
    """What the graph starts from: [run] urls (a stage command's given files), the URL lists a run's Reddit dumps
    give (reddit_lists), or a run's web archives ([run] warcs)."""
    if settings.command is None and settings.run.reddit_dumps:
        return reddit_lists(settings)
    return settings.run.warcs if settings.command is None and settings.run.warcs else settings.run.urls


def input_kind(settings: RunConfig) -> str:
    """What the graph's input files are: "warc" (web archives: a run's [run] warcs, `textmill warc`'s), "urls" (URL
    lists: a run's, `textmill blacklist`'s) or "documents" (the shards given to another stage command)."""
    if settings.command == "warc" or (settings.command is None and settings.run.warcs):
        return "warc"
    return "urls" if settings.command in (None, "blacklist") else "documents"
