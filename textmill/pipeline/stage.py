"""The keep/reject loop every document stage shares: a stage only decides about one document; this loop
reads the shard, rejects the records that are not documents (with the reader's reason), asks the stage
about each other one, writes kept and rejected rows, counts, and checks `kept + rejected == input` when
it writes the manifest (datatrove's split: a filter implements `filter(doc)`, the base owns the loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Union

from textmill.pipeline.documents import iter_documents
from textmill.pipeline.shards import DOC_SCHEMA, ShardOutput

# What a stage says about a document: (row, None) keeps it (as changed, or as it came); (rows, None) with a
# list keeps it as several pieces; (row, reason) rejects it, the row as it should be kept among the rejects.
Verdict = tuple[Union[dict, list[dict]], Union[str, None]]


def filter_documents(stage: str, shard: Path, output: Path, params: dict, decide: Callable[[dict], Verdict],
                     inputs: Iterable[Path] | None = None, stats: dict | None = None,
                     max_document_bytes: int = 0, listed: Iterable[str] = ()) -> dict:
    """Run `decide` over the documents of `shard` into `output`; returns the manifest, which also holds
    `stats` as they are when the shard is done (a stage's own counters, which `decide` updates). A record
    of another tool's file over `max_document_bytes` is rejected as too_large (iter_documents). `listed`: the
    reasons `decide` gives beyond those reasons.py lists for `stage` (a filter of one's own's)."""
    n = 0
    params = {**params, "max_document_bytes": max_document_bytes}
    with ShardOutput(stage, output, DOC_SCHEMA, [shard] if inputs is None else inputs, params, listed) as out:
        for row, bad in iter_documents(shard, max_document_bytes):
            n += 1
            if bad:
                out.reject(row, bad)
                continue
            kept, reason = decide(row)
            if reason is not None:
                out.reject(kept, reason)
            elif isinstance(kept, list):
                out.keep_pieces(kept)
            else:
                out.keep(kept)
        return out.finish(n, **(stats or {}))
