"""The workflow's process-wide memos, all here. Luigi asks every task for its key, output and completeness
many times while it builds and walks the graph (tens of thousands of times for a large run); without
these, the walk re-reads the run file, lists the URL folders and recomputes chained keys at each question,
which made it quadratic in the number of URL list files. Each memo is keyed by what can change its value
(the settings, file modification times), and all are dropped by forget(), which a run, a stage command and a
status call first; none outlives the process.
textmill.io.files keeps the two memos about files (fingerprints, damage already reported).
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from textmill.run_file import RunConfig, load_config
from textmill.variants import split_variant, variant_config


def key_of(*parts) -> str:
    """A short stable hash of JSON-able parts: what names a task's folder (memoized below, by task)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# RunTask.key by (task id, settings, URL list stamps): keys are chains (a dedup key holds every shard's
# scrape key), so each is computed once.
TASK_KEYS: dict[tuple, str] = {}

# RunTask.folder by the same: a step that shares its stage's folder asks its input for it, and that input
# its own (a filtered dedup shard asks the clusters, which ask a band merge).
TASK_FOLDERS: dict[tuple, object] = {}

# The chained keys of all blacklist shards by settings (the URL lists as first read since forget()), in one pass.
BLACKLIST_KEYS: dict[RunConfig, tuple[str, ...]] = {}

# The URL lists a run's Reddit dumps give, by settings (source_tasks.reddit_lists): every key asks for them.
REDDIT_LISTS: dict[RunConfig, tuple] = {}

# The shuffle's shard count by its plan file, once written (a keyed folder's plan never changes): every task of
# the fan-out over the shuffled shards asks for it, to know its batch (batches.py).
PLANNED_COUNTS: dict[object, int] = {}

# A shuffle gather's inputs by its memo (ShuffleGather.gathered_from): asked by its reuse check and its make, and each
# asking builds every scattered shard's target.
GATHERED_FROM: dict[tuple, tuple] = {}

# The units of each part of the corpus by settings (parts.corpus_parts): read from the parts' list once per process,
# so that a list written part-way through the run changes no task's key in it.
CORPUS_PARTS: dict[RunConfig, tuple[tuple[int, ...], ...]] = {}


# The run's settings by run file (or variant), and the times of the graph's input entries by settings, as they were
# when this process first asked since forget(): a large graph's walk asks at every task (1.5 million times at 8,000
# units), and one run sees one version of its run file and URL lists throughout.
PINNED_CONFIGS: dict[str, RunConfig] = {}
PINNED_STAMPS: dict[RunConfig, tuple] = {}

# A run's tasks by the arguments they were made with (variant_tasks.SharedAcrossVariants): which variant's task a
# variant shares depends on keys, so on the files.
TASKS_MADE: dict[tuple, object] = {}

# Every unit's task of a kind by (what makes it, run file) (framework.every_unit): a reduce step requires them all.
UNIT_TASKS: dict[tuple, tuple] = {}


def forget() -> None:
    """Drop every memo: a run, a stage command or a status starts from the files as they are now (a run file or
    URL list changed in place, inside a folder whose own time did not change, is read again)."""
    for memo in (TASK_KEYS, TASK_FOLDERS, BLACKLIST_KEYS, REDDIT_LISTS, PLANNED_COUNTS, CORPUS_PARTS, GATHERED_FROM,
                 PINNED_CONFIGS, PINNED_STAMPS, TASKS_MADE, UNIT_TASKS):
        memo.clear()
    for cached in (listed_inputs, listed_units, given_tokenizer, url_rules):
        cached.cache_clear()


def run_config(config: str) -> RunConfig:
    """The run's configuration (or a variant's: textmill.variants), as it was when first asked since forget()."""
    if config not in PINNED_CONFIGS:
        path, variant, seed = split_variant(config)
        path = Path(path).resolve()
        PINNED_CONFIGS[config] = load_config(str(path) if variant is None else variant_config(path, variant, seed))
    return PINNED_CONFIGS[config]


@functools.lru_cache(maxsize=8)
def listed_inputs(given: tuple[Path, ...], stamps: tuple, kind: str) -> tuple[Path, ...]:
    """The input files of the given entries (URL lists, web archives, or a stage command's shards, by `kind`),
    listed again only when an entry's mtime changes."""
    from textmill.pipeline.blacklist import url_list_files
    from textmill.pipeline.shards import list_shards
    from textmill.pipeline.units import warc_files

    return tuple({"urls": url_list_files, "warc": warc_files, "documents": list_shards}[kind](given))


@functools.lru_cache(maxsize=8)
def listed_units(given: tuple[Path, ...], stamps: tuple, kind: str, per_unit: int) -> tuple:
    """The units of work of the input files, listed again when listed_inputs would be: each URL list's or web
    archive's units, each given document file's (`per_unit` 0: every file whole; textmill.pipeline.units)."""
    from textmill.pipeline.units import document_units, url_units, warc_units

    files = listed_inputs(given, stamps, kind)
    if kind == "documents" and not per_unit:
        return files
    cut = {"urls": url_units, "warc": warc_units, "documents": document_units}[kind]
    return tuple(unit for path in files for unit in cut(path, per_unit))


@functools.lru_cache(maxsize=4)
def given_tokenizer(tokenize):
    """The tokenizer a TokenizeConfig names, loaded once per process (every cleaned unit counts tokens with it)."""
    return tokenize.given_tokenizer()


@functools.lru_cache(maxsize=4)
def url_rules(blacklist):
    """The URL rules a BlacklistConfig gives (the bundled lists and the user's), read once per process: every
    unit's check is keyed by them."""
    from textmill.pipeline.blacklist import UrlRules

    return UrlRules.with_extra(blacklist)
