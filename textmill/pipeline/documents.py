"""Reading the documents a corpus stage takes, and writing them for other tools.

A stage reads Parquet shards an earlier stage wrote, loose JSON lines (Megatron's format; datatrove's and
Dolma's .jsonl.gz and .json.gz) and other tools' Parquet with a `text` column (datatrove's, Dolma's: `id`,
`text`, `metadata`). A record from another tool becomes a document row (`document_row`): its fields that
are textmill's columns (`url`, `title`, ... at the top or in its `metadata`) fill them, and the rest is kept
as its `metadata` (a JSON object), as datatrove's readers fold a record's other fields into its metadata.
`datatrove_record` is the way back: what datatrove's JSONL writer writes, textmill's columns in the
metadata, so a document read back from it is the row it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from textmill.io.files import has_lone_surrogate, is_loose_json, iter_json_lines, json_value
from textmill.pipeline.blacklist import url_id
from textmill.pipeline.shards import DOC_SCHEMA, holds_records, read_rows, shard_kind
from textmill.pipeline.units import unit_origin

OWN_FIELDS = ("id", "text", "metadata")  # every other column may come from a record's fields or metadata
_BLANK = dict.fromkeys(DOC_SCHEMA.names)


def iter_documents(path: Path, max_bytes: int = 0) -> Iterator[tuple[dict, str | None]]:
    """(document row, None) for each record of a shard, or (row, reason) for a bad one to reject.

    A loose JSON line that is not valid UTF-8 JSON, or a record without a string "text", becomes a reject
    that names its line, never a silent skip. So does a record of another tool's file over `max_bytes` (a
    JSON line's bytes, a Parquet row's text in UTF-8; 0 takes any): `too_large`, its text cut to 200
    characters. textmill's own shards hold documents that passed the limit where they came in (a scraped
    page is bounded by [scrape] max_bytes). A record's id is its "id" field, else one derived from its
    URL, else "<file>:<line>"."""
    name, first = unit_origin(path)  # a unit cut from a bigger file names its records as that file does
    if is_loose_json(path):
        for lineno, raw, obj, reason in iter_json_lines(path, max_bytes):
            where = f"{name}:{lineno + first - 1}"
            if reason:
                yield {**_BLANK, "id": where, "text": raw[:200].decode("utf-8", "replace")}, reason
            else:
                yield document_row(obj, where)
    elif is_foreign_parquet(path):
        for number, record in enumerate(read_rows(path), first):
            row, reason = document_row(record, f"{name}:{number}")
            if reason is None and max_bytes and utf8_over(row["text"], max_bytes):
                row, reason = {**row, "text": row["text"][:200]}, "too_large"
            yield row, reason
    else:
        for row in read_rows(path, kind="document"):
            yield row, None


def utf8_over(text: str, limit: int) -> bool:
    """Whether `text` takes more than `limit` bytes in UTF-8 (encoded only when its length cannot tell)."""
    return len(text) > limit or (4 * len(text) > limit and len(text.encode("utf-8", "surrogatepass")) > limit)


def is_foreign_parquet(path: Path) -> bool:
    """A Parquet file of another tool's documents (a `text` column, not textmill's document columns)."""
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError):
        return False  # read_rows says what is wrong with it
    return shard_kind(schema) != "document" and holds_records(schema)


def document_row(record: object, where: str) -> tuple[dict, str | None]:
    """A record of another tool as a document row (and None), or a reject (row, reason)."""
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        return {**_BLANK, "id": where}, "missing_text"
    metadata = record.get("metadata")
    if isinstance(metadata, str):  # datatrove's readers accept metadata as JSON text too
        metadata = metadata_of_text(metadata)
    metadata = {} if metadata is None else dict(metadata) if isinstance(metadata, dict) else {"metadata": metadata}
    top = {k: v for k, v in record.items() if k not in OWN_FIELDS}
    row = dict(_BLANK)
    for source in (top, metadata):  # a column is filled from the top level first, else from the metadata
        for name in [k for k in source if k in _FILLS and row[k] is None]:
            if _FILLS[name](source[name]):
                row[name] = source.pop(name)
    rest = metadata | top  # a record's other fields join its metadata (top-level ones win), as in datatrove
    row["metadata"] = json.dumps(rest, ensure_ascii=False, sort_keys=True, default=str) if rest else None
    row["text"] = record["text"]
    row["id"] = str(record["id"]) if record.get("id") is not None else (url_id(row["url"]) if row["url"] else where)
    return row, None


def metadata_of_text(text: str) -> object:
    """Metadata given as JSON text, parsed; kept as the text when it is not JSON, or when it holds an escaped lone
    surrogate (`"\\ud800"`), which no UTF-8 shard can hold: a field textmill does not read never costs a document."""
    try:
        value = json_value(text)
    except (ValueError, RecursionError):
        return text
    return text if "\\u" in text and has_lone_surrogate(value) else value


def _is_string(value: object) -> bool:
    return isinstance(value, str)


def _is_int32(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -2**31 <= value < 2**31


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fill_test(kind: pa.DataType):
    """The test of whether a JSON value can fill a column of this type (a value that cannot stays in the
    metadata)."""
    if kind == pa.string():
        return _is_string
    return _is_int32 if pa.types.is_integer(kind) else _is_number


# Each column a record's field may fill, with its test (decided once, not per record and field).
_FILLS = {field.name: _fill_test(field.type) for field in DOC_SCHEMA if field.name not in OWN_FIELDS}


def datatrove_record(row: dict) -> dict:
    """A document row as datatrove's JSONL writer writes a Document: text, id, and metadata holding the
    row's metadata and its other columns that have a value."""
    metadata = json.loads(row["metadata"]) if row.get("metadata") else {}
    metadata |= {k: v for k, v in row.items() if k not in OWN_FIELDS and v is not None}
    return {"text": row["text"], "id": row["id"], **({"metadata": metadata} if metadata else {})}
