"""Reading the documents a corpus stage takes: Parquet shards an earlier stage wrote, or loose JSON lines
(Megatron's format), each record yielded with the reason it must be rejected, if any."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from textmill.io.files import is_loose_json, iter_json_lines
from textmill.pipeline.blacklist import url_id
from textmill.pipeline.shards import DOC_SCHEMA, read_rows


def iter_documents(path: Path) -> Iterator[tuple[dict, str | None]]:
    """(document row, None) for each record of a shard, or (row, reason) for a bad one to reject.

    Parquet shards hold DOC_SCHEMA rows. Loose JSON (.jsonl/.json, Megatron's format, one object a line
    with at least "text") is read too; a line that is not valid UTF-8 JSON, or lacks a string "text",
    becomes a reject that names its line, never a silent skip. Its id is the "id" field, else one
    derived from "url", else "<file>:<line>"."""
    if not is_loose_json(path):
        for row in read_rows(path, kind="document"):
            yield row, None
        return
    blank = {name: None for name in DOC_SCHEMA.names}
    for lineno, raw, obj, reason in iter_json_lines(path):
        where = f"{path.name}:{lineno}"
        if reason:
            yield {**blank, "id": where, "text": raw[:200].decode("utf-8", "replace")}, reason
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            yield {**blank, "id": where}, "missing_text"
            continue
        url = obj.get("url") if isinstance(obj.get("url"), str) else None
        doc_id = str(obj["id"]) if obj.get("id") is not None else (url_id(url) if url else where)
        row = {**blank, **{k: obj[k] for k in DOC_SCHEMA.names if k in obj}, "id": doc_id, "url": url}
        yield row, None
