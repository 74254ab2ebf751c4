"""The corpus stages from Python: a `Pipeline` of steps, each a stage as its command runs it (its tasks, its
workers, its reruns that skip what is finished), and filters of one's own (`DocumentFilter`) among them, run
with the stages' own shard writing: rejects with reasons, manifests, counts in the summary.

    from textmill.api import DocumentFilter, Pipeline

    class NoShouting(DocumentFilter):
        name = "shouting"
        reasons = {"all_caps": "every letter a capital"}

        def reject(self, document):
            return "all_caps" if document["text"].isupper() else None

    steps = Pipeline("work", inputs=["docs.jsonl"]).dedup().clean(min_tokens=64).filter(NoShouting()).shuffle()
    for counts in steps.run(workers=2):
        print(counts.stage, counts.kept, counts.reasons)

Each step writes WORK/<n>-<name>/ and reads what the step before it wrote (the first, `inputs`). docs/python.md
has the whole guide.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from textmill.errors import TextmillError
from textmill.io.files import read_json_record
from textmill.pipeline.reasons import READ
from textmill.pipeline.shards import list_shards, manifest_path, rejects_path, shard_stem
from textmill.pipeline.stage import filter_documents
from textmill.report.lines import stage_line, stage_summary
from textmill.report.record import StageCounts
from textmill.run_file import TABLES

# Each stage: the run file's table whose settings its step takes as keyword arguments.
STAGE_TABLES = {"reddit-urls": "reddit", "blacklist": "blacklist", "scrape": "scrape", "dedup": "dedup",
                "clean": "clean", "quality": "quality", "shuffle": "shuffle", "decontaminate": "decontaminate"}


class DocumentFilter:
    """A filter of one's own. `reject(document)` gets a document (id, url, title, text, ...) and returns None to
    keep it, or the reason it is rejected: a short word, listed with what it means in `reasons`, counted in the
    summary and kept with the reject as textmill's own reasons are (one not listed is an error, as it is for
    textmill's stages). `name` names its step's folder and its manifests. What decides its answers is
    in `params()` (by default its instance's fields): a filter whose params change runs again, one whose do not
    skips the shards it finished."""

    name = "filter"
    reasons: dict[str, str] = {}  # each reason it gives, and what it means (as reasons.py lists textmill's own)
    # When reject() raises: "stop" ends the step with one error naming the filter, the shard and the document;
    # "reject" rejects that document with reason `filter_error` (counted, kept among the rejects) and goes on.
    on_error = "stop"

    def reject(self, document: dict) -> str | None:
        raise NotImplementedError

    def params(self) -> dict:
        fields = dataclasses.asdict(self) if dataclasses.is_dataclass(self) else dict(vars(self))
        return {"filter": f"{type(self).__module__}.{type(self).__qualname__}", **fields}


FILTER_ERROR = "filter_error"


class FilterFailed(TextmillError):
    """A filter of one's own raised on a document."""


def filter_shard(shard: Path, output: Path, document_filter: DocumentFilter) -> dict:
    """One shard through a DocumentFilter, written as every stage writes its shards; its manifest."""
    if document_filter.on_error not in ("stop", "reject"):
        raise TextmillError(f"filter {document_filter.name!r}: on_error is 'stop' or 'reject', not "
                            f"{document_filter.on_error!r}")

    def decide(row: dict):
        try:
            return row, document_filter.reject(row)
        except Exception as exc:
            if document_filter.on_error == "reject":
                return row, FILTER_ERROR
            raise FilterFailed(f"filter {document_filter.name!r} raised {type(exc).__name__}: {exc} on document "
                               f"{row['id']!r} of {shard} (fix it, or set on_error = 'reject' to reject such "
                               f"documents as {FILTER_ERROR})") from exc

    return filter_documents(document_filter.name, shard, output, document_filter.params(), decide,
                            listed=[*READ, *document_filter.reasons, FILTER_ERROR])


def finished(output: Path, params: dict) -> dict | None:
    """The manifest of the shard `output` when a filter of these params finished it, else None."""
    manifest = read_json_record(manifest_path(output), "the shard is filtered again")
    if manifest is None:
        return None
    recorded = {k: v for k, v in manifest.get("params", {}).items() if k != "max_document_bytes"}
    return manifest if recorded == params else None


class Pipeline:
    def __init__(self, work: str | Path, inputs: list[str | Path] | None = None):
        """`work`: the folder the steps write into; `inputs`: what the first step reads (URL lists, dumps, or
        documents: files or folders), when it is not given to that step."""
        self.work = Path(work)
        self.inputs = [str(p) for p in inputs or []]
        self.steps: list[tuple[str, object]] = []

    def stage(self, name: str, **settings) -> Pipeline:
        """A corpus stage as a step, with its settings by their names in the run file's table (docs/settings.md)."""
        if name not in STAGE_TABLES:
            raise TextmillError(f"no stage {name!r} (the stages: {', '.join(STAGE_TABLES)})")
        table = STAGE_TABLES[name]
        config = TABLES[table].settings
        unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(config)})
        if unknown:
            raise TextmillError(f"{name} has no setting {unknown[0]!r} (its settings: [{table}] in docs/settings.md)")
        self.steps.append((name, {table: config(**settings)}))
        return self

    def reddit_urls(self, **settings) -> Pipeline:
        return self.stage("reddit-urls", **settings)

    def blacklist(self, **settings) -> Pipeline:
        return self.stage("blacklist", **settings)

    def scrape(self, **settings) -> Pipeline:
        return self.stage("scrape", **settings)

    def dedup(self, **settings) -> Pipeline:
        return self.stage("dedup", **settings)

    def clean(self, **settings) -> Pipeline:
        return self.stage("clean", **settings)

    def quality(self, **settings) -> Pipeline:
        return self.stage("quality", **settings)

    def shuffle(self, **settings) -> Pipeline:
        return self.stage("shuffle", **settings)

    def decontaminate(self, **settings) -> Pipeline:
        return self.stage("decontaminate", **settings)

    def filter(self, document_filter: DocumentFilter) -> Pipeline:
        """A DocumentFilter as a step, run over every shard of the step before it."""
        if not isinstance(document_filter, DocumentFilter):
            raise TextmillError(f"filter() takes a DocumentFilter, not {type(document_filter).__name__}")
        self.steps.append((document_filter.name, document_filter))
        return self

    def run(self, workers: int = 1, verbose: bool = True) -> list[StageCounts]:
        """Every step in order, each by `workers` processes, redoing only what is not finished; each step's
        counts (printed as the commands print them, unless not `verbose`)."""
        from textmill.workflows.commands import run_stage

        if not self.inputs:
            raise TextmillError("the first step has nothing to read: Pipeline(work, inputs=[...])")
        inputs, done = self.inputs, []
        for number, (name, step) in enumerate(self.steps, 1):
            folder = self.work / f"{number}-{name}"
            started = time.perf_counter()
            if isinstance(step, DocumentFilter):
                manifests = run_filter(step, inputs, folder, workers)
            else:
                manifests = run_stage(name, inputs, folder, step, workers).manifests
            counts = stage_summary(name, manifests, folder, time.perf_counter() - started)
            if verbose:
                print(stage_line(counts), flush=True)
            done.append(counts)
            inputs = [str(folder)]
        return done


def run_filter(document_filter: DocumentFilter, inputs: list[str], folder: Path, workers: int) -> list[dict]:
    """A DocumentFilter over every shard of `inputs` into `folder` by `workers` forked processes (which inherit
    the filter as it is), skipping the shards it finished with the same params; their manifests."""
    folder.mkdir(parents=True, exist_ok=True)
    shards = list_shards(inputs)
    outputs = [folder / f"{shard_stem(shard)}.parquet" for shard in shards]
    manifests = {o: finished(o, document_filter.params()) for o in outputs}
    todo = [(s, o) for s, o in zip(shards, outputs, strict=True) if manifests[o] is None]
    if workers > 1 and len(todo) > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            written = list(pool.map(filter_shard, *zip(*todo, strict=True), [document_filter] * len(todo)))
    else:
        written = [filter_shard(s, o, document_filter) for s, o in todo]
    manifests.update(zip((o for _, o in todo), written, strict=True))
    for stale in set(folder.glob("*.parquet")) - set(outputs):  # of inputs it had before: the next step must not read them
        for path in (stale, manifest_path(stale), rejects_path(stale)):
            path.unlink(missing_ok=True)
    return [manifests[o] for o in outputs]
