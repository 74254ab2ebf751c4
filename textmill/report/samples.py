"""What a run's record keeps for report.html, read from the stages' shards when the record is written: a few
examples each stage kept and rejected, duplicates beside the documents they repeat, and the length histograms
of the corpus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator


def histogram(values) -> dict:
    """40 bins and the median, mean and maximum: what the report draws, small enough for run.json."""
    import numpy as np

    values = np.asarray(values, dtype=np.int64)
    if not len(values):
        values = np.zeros(1, np.int64)
    counts, edges = np.histogram(values, bins=40)
    return {"documents": int(len(values)), "median": float(np.median(values)), "mean": float(values.mean()),
            "max": int(values.max()), "counts": counts.tolist(), "edges": edges.tolist()}


KEPT_EXAMPLES, REJECTED_EXAMPLES, SCANNED_SHARDS = 3, 2, 8  # per stage; per reason; the shards read for them
EXCERPT_CHARS = 160


def excerpt(text: str | None) -> str | None:
    """The first lines of a text, at most EXCERPT_CHARS characters."""
    if text is None:
        return None
    lines = " / ".join(line.strip() for line in text.splitlines() if line.strip())
    return lines if len(lines) <= EXCERPT_CHARS else lines[:EXCERPT_CHARS] + " ..."


def example(row: dict) -> dict:
    return {"id": row.get("id"), "url": row.get("url"), "text": excerpt(row.get("text"))}


def json_lines(path: Path) -> Iterator[dict]:
    """The records of a JSON-lines shard (reddit-urls' URL lists)."""
    with open(path, "rb") as f:
        for line in f:
            yield json.loads(line)


def stage_examples(shards: list[Path], reasons: list[str]) -> dict:
    """A few records a stage kept, and a few it rejected for each reason, from its first shards (local); a
    reject that names another document (`near_duplicate_of=<id>`) with that document's URL."""
    from textmill.pipeline.shards import earlier_or_current, read_rows, reason_key, rejects_path
    from textmill.report.inspect import named_documents, urls_of

    kept: list[dict] = []
    for shard in shards[:SCANNED_SHARDS]:
        for row in json_lines(shard) if shard.suffix == ".jsonl" else read_rows(shard):
            if len(kept) == KEPT_EXAMPLES:
                break
            kept.append(example(row))
    rejected: dict[str, list[dict]] = {reason: [] for reason in reasons}
    for shard in shards[:SCANNED_SHARDS]:
        full = all(len(rows) == REJECTED_EXAMPLES for rows in rejected.values())
        if full or not earlier_or_current(rejects_path(shard)).exists():
            continue
        for row in read_rows(earlier_or_current(rejects_path(shard))):
            rows = rejected.get(reason_key(row["reason"]))
            if rows is not None and len(rows) < REJECTED_EXAMPLES:
                rows.append({**example(row), "reason": row["reason"]})
    found = [e for rows in rejected.values() for e in rows]
    urls = urls_of(named_documents(found), shards[:SCANNED_SHARDS])
    for e in found:
        if e["reason"].partition("=")[2] in urls:
            e["named_url"] = urls[e["reason"].partition("=")[2]]
    return {"kept": kept, "rejected": {reason: rows for reason, rows in rejected.items() if rows}}


def duplicate_pairs(duplicates: dict[str, str], exact: set[str], shards: list[Path], count: int = 3) -> list[dict]:
    """The first `count` duplicates with the documents they duplicate, read from dedup's shards (the kept
    document) and their rejects (the duplicate)."""
    from textmill.pipeline.shards import earlier_or_current, read_rows, rejects_path

    wanted = dict(list(duplicates.items())[:count])
    ids = set(wanted) | set(wanted.values())
    found: dict[str, dict] = {}
    for shard in shards:
        for path in (shard, earlier_or_current(rejects_path(shard))):
            if path.exists() and len(found) < len(ids):
                found.update({row["id"]: example(row) for row in read_rows(path, columns=["id", "url", "text"])
                              if row["id"] in ids})
    return [{"duplicate": found[d], "kept": found[k], "exact": d in exact}
            for d, k in wanted.items() if d in found and k in found]


def corpus_histograms(document_shards: list[str], datasets: list[str]) -> dict:
    """Characters per document (the final document shards; none given, none counted) and tokens per document (the
    token files: the merged ones, or every shard's of the parts form)."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from textmill.megatron.indexed import IndexedDataset

    characters = []
    for shard in document_shards:  # one column of one shard at a time
        characters += pc.utf8_length(pq.read_table(shard, columns=["text"])["text"]).to_pylist()
    tokens = np.concatenate([IndexedDataset(dataset).lengths for dataset in datasets])
    return {**({"characters": histogram(characters)} if document_shards else {}), "tokens": histogram(tokens)}
