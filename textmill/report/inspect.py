"""`textmill inspect`: what a file textmill wrote holds, for a person, without writing code: a stage's shard
or rejects (Parquet), loose JSON lines, a manifest, a stage's folder, or Megatron token files (.bin/.idx),
whose documents are decoded back to text with a tokenizer. Records can be picked by reject reason, id or
URL; a reject that names another document (`near_duplicate_of=<id>`) is shown with that document's URL."""

from __future__ import annotations

import heapq
import json
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq

from textmill.errors import TextmillError
from textmill.io.files import is_loose_json
from textmill.io.numbers import whole_number
from textmill.megatron.indexed import IndexedDataset, data_file_path, index_file_path
from textmill.pipeline.documents import iter_documents
from textmill.pipeline.shards import earlier_or_current, manifest_path, read_rows, reason_key, record_path

TEXT_CHARS = 300  # of a record's text shown
TOKEN_IDS = 24  # of a token document's ids shown
NAMES_DOCUMENT = ("near_duplicate_of", "exact_duplicate_of")  # reasons whose detail is another document's id


class Selection:
    """Which records to show: the first `head` of those matching the reason, id and URL given; or, with `sort`
    (a column, or a key of the records' metadata, such as classifier_score), the `head` with its highest values
    (its lowest with `ascending`)."""

    def __init__(self, head: int, reason: str | None = None, record_id: str | None = None, url: str | None = None,
                 sort: str | None = None, ascending: bool = False):
        self.head, self.reason, self.record_id, self.url = head, reason, record_id, url
        self.sort, self.ascending = sort, ascending

    def sort_value(self, row: dict) -> float | None:
        """The row's value of the sort field, a number, or None when it has none."""
        value = row.get(self.sort)
        if value is None and row.get("metadata"):
            try:
                metadata = json.loads(row["metadata"])
            except ValueError:
                metadata = None
            value = metadata.get(self.sort) if isinstance(metadata, dict) else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def wants(self, row: dict) -> bool:
        if self.reason and self.reason not in (row.get("reason"), reason_key(row.get("reason") or "")):
            return False
        if self.record_id is not None and str(row.get("id")) != self.record_id:
            return False
        return self.url is None or row.get("url") == self.url


def inspect(path: Path, selection: Selection, tokenizer=None) -> list[str]:
    """The lines `textmill inspect` prints for `path`."""
    if path.is_dir():
        return folder_lines(path)
    if path.parent.name == ".manifests" or path.name.endswith("manifest.json") or path.name in ("task.json", ".task.json"):
        return manifest_lines(path)
    prefix = path.with_suffix("") if path.suffix in (".bin", ".idx") else path
    if index_file_path(prefix).exists() or data_file_path(prefix).exists():
        return token_lines(prefix, selection, tokenizer)
    if not path.exists():
        raise TextmillError(f"{path}: no such file, folder or token files (PREFIX.bin/.idx)")
    if is_loose_json(path):
        return record_lines(path, "loose JSON lines", loose_json_rows(path), None, selection)
    try:
        reader = pq.ParquetFile(path)
    except Exception:
        raise TextmillError(f"{path}: not a shard, rejects file, manifest, JSON lines or token files textmill reads") from None
    columns = ", ".join(f"{f.name} ({f.type})" for f in reader.schema_arrow)
    return record_lines(path, f"Parquet, {reader.metadata.num_rows:,} rows; columns {columns}", read_rows(path),
                        reader.metadata.num_rows, selection)


def loose_json_rows(path: Path) -> Iterator[dict]:
    for row, bad in iter_documents(path):
        yield {**row, "reason": bad} if bad else row


def record_lines(path: Path, what: str, rows: Iterator[dict], total: int | None, selection: Selection) -> list[str]:
    """The file's kind, its reasons counted (for rejects), and the selected records."""
    shown, reasons, count, ranked = [], {}, 0, []  # ranked: a heap of the `head` best (value, order, row) so far
    for row in rows:
        count += 1
        if row.get("reason"):
            key = reason_key(row["reason"])
            reasons[key] = reasons.get(key, 0) + 1
        if selection.sort is None:
            if len(shown) < selection.head and selection.wants(row):
                shown.append(row)
        elif selection.wants(row) and (value := selection.sort_value(row)) is not None:
            entry = (-value if selection.ascending else value, -count, row)
            if len(ranked) < selection.head:
                heapq.heappush(ranked, entry)
            elif entry[:2] > ranked[0][:2]:
                heapq.heapreplace(ranked, entry)
    if selection.sort is not None:
        shown = [row for *_, row in sorted(ranked, key=lambda e: e[:2], reverse=True)]
    lines = [f"{path}: {what}" if total is not None else f"{path}: {what}, {count:,} records"]
    if reasons:
        lines.append("rejected by reason: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])))
    urls = keeper_urls(path, shown)
    order = "" if selection.sort is None else f", {'lowest' if selection.ascending else 'highest'} {selection.sort} first"
    lines.append(f"{len(shown)} record(s) shown{order}" + (" (none matches)" if not shown else ""))
    for row in shown:
        lines += ["", *row_lines(row, urls)]
    return lines


def keeper_urls(path: Path, rows: list[dict]) -> dict[str, str]:
    """The URLs of the documents the rows' reasons name, from the kept shards of `path`'s stage folder (a
    rejects file lies in its .rejects subfolder)."""
    folder = path.parent.parent if path.parent.name.startswith(".") else path.parent
    return urls_of(named_documents(rows), sorted(folder.glob("*.parquet")))


def named_documents(rows: list[dict]) -> set[str]:
    """The ids of the documents the rows' reasons name (`near_duplicate_of=<id>`)."""
    return {r["reason"].partition("=")[2] for r in rows if r.get("reason") and reason_key(r["reason"]) in NAMES_DOCUMENT}


def urls_of(ids: set[str], shards: list[Path]) -> dict[str, str]:
    """The URLs of the documents `ids`, from those of `shards` that hold kept documents."""
    found: dict[str, str] = {}
    for shard in shards if ids else ():
        if shard.name.endswith((".rejects.parquet", ".html.parquet")) or len(found) == len(ids):  # an earlier layout's
            continue
        try:
            for row in read_rows(shard, columns=["id", "url"]):
                if row["id"] in ids:
                    found[row["id"]] = row["url"]
        except (TextmillError, KeyError):
            continue  # not a document shard
    return found


def row_lines(row: dict, urls: dict[str, str]) -> list[str]:
    head = [f"id {row.get('id')}"] + [f"{k} {row[k]}" for k in ("url", "title") if row.get(k)]
    lines = [" | ".join(head)]
    if row.get("reason"):
        detail = row["reason"].partition("=")[2]
        named = urls.get(detail) if reason_key(row["reason"]) in NAMES_DOCUMENT else None
        lines.append(f"  rejected: {row['reason']}" + (f" (kept: {named})" if named else ""))
    other = {k: v for k, v in row.items() if k not in ("id", "url", "title", "text", "reason") and v not in (None, "")}
    if other:
        lines.append("  " + ", ".join(f"{k}={v}" for k, v in other.items()))
    text = row.get("text")
    if text is not None:
        lines.append(f"  text ({len(text):,} characters):")
        lines += ["    " + line for line in clip(text).splitlines()]
    return lines


def clip(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS] + " [...]"


def manifest_lines(path: Path) -> list[str]:
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TextmillError(f"{path}: not a readable JSON record ({exc})") from None
    lines = [f"{path}: {m.get('stage') or m.get('task') or 'record'}"]
    for key in ("output", "counts", "reasons", "bytes", "seconds"):
        if key in m:
            lines.append(f"  {key}: {json.dumps(m[key])}")
    if "params" in m:
        lines.append(f"  settings: {json.dumps(m['params'], sort_keys=True)}")
    if "inputs" in m:
        lines.append(f"  inputs: {', '.join(str(i.get('path')) for i in m['inputs'][:5])}"
                     + (f" and {len(m['inputs']) - 5} more" if len(m["inputs"]) > 5 else ""))
    rest = {k: v for k, v in m.items() if k not in ("stage", "task", "output", "counts", "reasons", "bytes", "seconds",
                                                   "params", "inputs", "textmill_version")}
    lines += [f"  {k}: {json.dumps(v)[:300]}" for k, v in rest.items()]
    return lines


def folder_lines(folder: Path) -> list[str]:
    """A stage's folder: each shard's counts from its manifest, and the totals."""
    shards = sorted([*folder.glob("*.parquet"), *folder.glob("*.jsonl.gz")])  # kept as Parquet or JSON lines
    manifests = [earlier_or_current(manifest_path(shard)) for shard in shards]
    manifests = [m for m in manifests if m.exists()]
    if not manifests:
        task = earlier_or_current(record_path(folder, "task.json"))
        if task.exists():
            return manifest_lines(task)
        raise TextmillError(f"{folder}: no shard manifests here (inspect a stage's output folder, or a file in one)")
    lines, total, reasons = [f"{folder}: {len(manifests)} shard(s)"], {"input": 0, "kept": 0, "rejected": 0}, {}
    for path in manifests:
        m = json.loads(path.read_text())
        c = m["counts"]
        lines.append(f"  {m['output']}: {c['input']:,} in, {c['kept']:,} kept, {c['rejected']:,} rejected")
        for k in total:
            total[k] += c[k]
        for k, v in m.get("reasons", {}).items():
            reasons[k] = reasons.get(k, 0) + v
    lines.append(f"all: {total['input']:,} in, {total['kept']:,} kept, {total['rejected']:,} rejected"
                 + (f" ({', '.join(f'{k} {v}' for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))})" if reasons else ""))
    return lines


def token_lines(prefix: Path, selection: Selection, tokenizer) -> list[str]:
    """Megatron token files: their size, and documents as token ids and, with a tokenizer, as text."""
    ds = IndexedDataset(prefix)
    tokens = int(ds.lengths.sum()) if len(ds) else 0
    lines = [f"{prefix}.bin/.idx: Megatron mmap token files, {ds.num_documents:,} documents, {len(ds):,} sequences, "
             f"{tokens:,} tokens ({ds.dtype})"]
    if selection.record_id is not None:
        number = whole_number(selection.record_id)
        if number is None or number >= ds.num_documents:
            raise TextmillError(f"--id for token files is a document number below {ds.num_documents}, "
                                f"not {selection.record_id[:40]}")
        numbers = [number]
    else:
        numbers = list(range(min(selection.head, ds.num_documents)))
    if tokenizer is None:
        lines.append("(--vocab-file and --merge-file decode the tokens to text)")
    for d in numbers:
        ids = [int(t) for seq in ds.document(d) for t in seq]
        lines += ["", f"document {d}: {len(ids):,} tokens: {' '.join(map(str, ids[:TOKEN_IDS]))}"
                  + (" ..." if len(ids) > TOKEN_IDS else "")]
        if tokenizer is not None:
            lines += ["    " + line for line in clip(tokenizer.decode(ids)).splitlines()]
    return lines
