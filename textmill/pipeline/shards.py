"""Shards, the unit of work of every corpus stage.

A stage turns input shards into one output shard per input (or per bucket). Each output is three files:

    NAME.parquet             the kept records (zstd Parquet; a URL list, reddit-urls' output, as NAME.jsonl)
    .rejects/NAME.parquet    the rejected records, same columns plus `reason`
    .manifests/NAME.json     counts, reasons, parameters, input fingerprints, timings

Only the kept records show in a stage's folder: every other file's name (its rejects, manifests, a
stage's own records) starts with a dot, so `datasets.load_dataset("parquet", data_dir=FOLDER)` and `ls`
see the corpus and nothing else. Folders written before textmill 0.2 kept them beside the shard
(NAME.rejects.parquet, NAME.manifest.json, task.json); they are still read (`earlier_or_current`), and a run
moves them into place (`upgrade_layout`).

Every file is written under a temporary name in the same directory and renamed into place when complete,
and the manifest is renamed last: a shard is finished exactly when its manifest exists, so a killed run
never leaves something that looks finished. `ShardOutput.finish` checks `kept + rejected == input`.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from textmill import __version__
from textmill.errors import TextmillError
from textmill.io.files import (
    LOOSE_JSON_SUFFIXES,
    PendingFile,
    atomic_path,
    file_fingerprint,
    missing_input,
    parquet_batches,
    read_json_record,
    temporary_path,
    write_json,
)
from textmill.pipeline.reasons import is_listed

URL_SCHEMA = pa.schema(
    [
        ("id", pa.string()),  # stable document id, derived from the normalised URL
        ("url", pa.string()),  # normalised URL
        ("source", pa.string()),  # "<file>:<line>" the URL came from
        ("metadata", pa.string()),  # what a JSON-lines list gave with the URL (a Reddit submission's id, score,
        # subreddit, time) as a JSON object, carried on to its document; null for a plain list
    ]
)

DOC_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("url", pa.string()),  # the URL as listed (normalised)
        ("final_url", pa.string()),  # after redirects
        ("domain", pa.string()),
        ("status", pa.int32()),  # HTTP status of the final response
        ("title", pa.string()),
        ("text", pa.string()),
        ("word_count", pa.int32()),
        ("elapsed_s", pa.float64()),  # wall-clock seconds of the fetch
        ("fetched_at", pa.string()),  # UTC ISO-8601 time the fetch finished
        ("metadata", pa.string()),  # the source's own metadata (datatrove's, Dolma's) as a JSON object, or null
    ]
)
# Columns that shards written before them lack; read as null.
LATER_COLUMNS = ("metadata",)

_SHARD_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_WRITE_BATCH_ROWS = 1024


def reject_schema(schema: pa.Schema) -> pa.Schema:
    """The rejects shard of a stage keeps every column of the record and adds the reason."""
    return schema.append(pa.field("reason", pa.string()))


def shard_stem(path: Path) -> str:
    """A shard's name without its format: NAME of NAME.parquet, NAME.jsonl, NAME.jsonl.gz, NAME.json.gz."""
    name = path.name
    suffix = next((s for s in (".parquet", *LOOSE_JSON_SUFFIXES) if name.lower().endswith(s)), path.suffix)
    return name[: len(name) - len(suffix)]


def rejects_path(shard: Path) -> Path:
    return sidecar_path(shard, "rejects")


def manifest_path(shard: Path) -> Path:
    return shard.parent / ".manifests" / f"{shard_stem(shard)}.json"


def sidecar_path(shard: Path, kind: str) -> Path:
    """Another per-shard file of a stage (its rejects, the raw HTML scrape keeps): .<kind>/NAME.parquet."""
    return shard.parent / f".{kind}" / f"{shard_stem(shard)}.parquet"


def record_path(folder: Path, name: str) -> Path:
    """A file or folder of a stage's own (dedup's clusters, the shuffle's plan, a task's record)."""
    return folder / f".{name}"


def earlier_layout(path: Path) -> Path | None:
    """Where textmill before 0.2 kept the file `path` names (beside the shards, no dot), or None."""
    hidden = path.parent.name
    if hidden == ".manifests":
        return path.parent.parent / f"{path.stem}.manifest.json"
    if hidden.startswith(".") and path.suffix == ".parquet":
        return path.parent.parent / f"{path.stem}.{hidden[1:]}{path.suffix}"
    if path.name.startswith("."):
        return path.with_name(path.name[1:])
    return None


def earlier_or_current(path: Path) -> Path:
    """`path`, or where an earlier textmill put the same file when only that exists."""
    earlier = earlier_layout(path)
    return earlier if earlier is not None and not path.exists() and earlier.exists() else path


EARLIER_RECORDS = ("task.json", "clusters.json", "plan.json", "selected.json", "pairs", "counts")


def upgrade_layout(folder: Path) -> int:
    """Move the files of a stage folder written before textmill 0.2 into this layout (renames, no copies);
    the number moved. A manifest or sidecar moves only beside a Parquet shard of its name, so token
    files' manifests (PREFIX.manifest.json, beside .bin/.idx) stay where they are."""
    moved = 0
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        stem, dot, kind = path.name.partition(".")
        if path.name in EARLIER_RECORDS:
            target = record_path(folder, path.name)
        elif kind == "manifest.json" and (folder / f"{stem}.parquet").exists():
            target = manifest_path(folder / f"{stem}.parquet")
        elif kind.endswith(".parquet") and kind.count(".") == 1 and (folder / f"{stem}.parquet").exists():
            target = sidecar_path(folder / f"{stem}.parquet", kind.split(".")[0])
        else:
            continue
        if not target.exists():
            target.parent.mkdir(exist_ok=True)
            os.replace(path, target)
            moved += 1
    return moved


def safe_shard_name(text: str) -> str:
    """A file-name-safe shard name (letters, digits, '-' and '_': a dot would read as a sidecar)."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_")
    if not name:
        raise TextmillError(f"cannot derive a shard name from {text!r}")
    return name


def write_table(table: pa.Table, path: Path) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=_WRITE_BATCH_ROWS)


class ShardWriter:
    """Streams rows into a Parquet file under a temporary name; `close()` renames it into place."""

    def __init__(self, path: Path, schema: pa.Schema, batch_rows: int = _WRITE_BATCH_ROWS):
        self.path = path
        self.batch_rows = batch_rows
        self.schema = schema
        self.rows = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = temporary_path(path)
        self._writer = pq.ParquetWriter(self._tmp, schema, compression="zstd")
        self._buffer: list[dict] = []

    def write(self, row: dict) -> None:
        self._buffer.append(row)
        self.rows += 1
        if len(self._buffer) >= self.batch_rows:
            self._flush()

    def write_table(self, table: pa.Table) -> None:
        """Write a table's rows, in row groups of `batch_rows` as `write` would (a table written after rows
        starts a new row group)."""
        self._flush()
        table = table.select(self.schema.names).cast(self.schema).combine_chunks()
        for start in range(0, table.num_rows, self.batch_rows):
            self._writer.write_table(table.slice(start, self.batch_rows))
        self.rows += table.num_rows

    def _flush(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.Table.from_pylist(self._buffer, schema=self.schema))
            self._buffer = []

    def close(self) -> None:
        self._flush()
        self._writer.close()
        with open(self._tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drop the temporary file (after close(), when it is already renamed, this does nothing)."""
        self._writer.close()  # closing twice is harmless
        if self._tmp.exists():
            self._tmp.unlink()


class JsonLinesWriter:
    """ShardWriter's `write`, `close` and `abort` for a JSON-lines file (UTF-8, an object a line): the kept
    records of a stage whose output is a list another tool reads as text (a URL list)."""

    def __init__(self, path: Path):
        self.rows = 0
        self._file = PendingFile(path)
        self.close, self.abort = self._file.close, self._file.abort

    def write(self, row: dict) -> None:
        self._file.write(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n")
        self.rows += 1


def reason_key(reason: str) -> str:
    """Reasons may carry a detail after '=' (`near_duplicate_of=<id>`, `status=404`); counts group
    by the part before it unless the detail is a small closed set (status codes, languages)."""
    key, _, detail = reason.partition("=")
    return reason if key in ("status", "language") else key


class ShardOutput:
    """Accounting and atomic output for one output shard of a stage.

    Use as a context manager: `keep()` and `reject()` each record, then `finish(n_input)`. Leaving the
    block without `finish` (an exception, a kill) removes the temporary files and writes no manifest.
    """

    def __init__(self, stage: str, output: Path, schema: pa.Schema, inputs: Iterable[Path], params: dict,
                 listed: Iterable[str] = ()):
        """`listed`: reasons it may give beyond those reasons.py lists for `stage` (a filter of one's own's)."""
        if not _SHARD_NAME.match(output.stem) or output.suffix not in (".parquet", ".jsonl"):
            raise TextmillError(f"bad output shard path {output} (want NAME.parquet or NAME.jsonl, NAME of [A-Za-z0-9_-])")
        self.stage = stage
        self.output = output
        self.inputs = [Path(p) for p in inputs]
        self.params = params
        self.listed = frozenset(listed)
        self.reasons: Counter[str] = Counter()
        self._kept = JsonLinesWriter(output) if output.suffix == ".jsonl" else ShardWriter(output, schema)
        self._rejects = ShardWriter(rejects_path(output), reject_schema(schema))
        self._split_rows = 0  # kept rows beyond one per kept input record
        self._started = time.perf_counter()
        self._finished = False

    def __enter__(self) -> "ShardOutput":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._finished:
            self._kept.abort()
            self._rejects.abort()

    @property
    def kept(self) -> int:
        """Input records kept (a record kept as several pieces counts once)."""
        return self._kept.rows - self._split_rows

    @property
    def rejected(self) -> int:
        return self._rejects.rows

    def keep(self, row: dict) -> None:
        self._kept.write(row)

    def keep_pieces(self, rows: list[dict]) -> None:
        """Keep one input record as several output rows (decontamination splits documents)."""
        for row in rows:
            self._kept.write(row)
        self._split_rows += len(rows) - 1

    def keep_table(self, table: pa.Table) -> None:
        """Keep every row of a table (the columnar form of `keep`)."""
        self._kept.write_table(table)

    def reject_table(self, table: pa.Table) -> None:
        """Reject every row of a table whose `reason` column says why (the columnar form of `reject`)."""
        reasons = table["reason"].to_pylist()
        for reason in set(reasons):
            self.check_listed(reason)
        self._rejects.write_table(table)
        self.reasons.update(reason_key(r) for r in reasons)

    def reject(self, row: dict, reason: str) -> None:
        self.check_listed(reason)
        self._rejects.write({**row, "reason": reason})
        self.reasons[reason_key(reason)] += 1

    def check_listed(self, reason: str) -> None:
        if reason.partition("=")[0] not in self.listed and not is_listed(self.stage, reason.partition("=")[0]):
            raise ValueError(f"{self.stage} rejects a record as {reason!r}, a reason textmill/pipeline/reasons.py "
                             "does not list for it")

    def finish(self, n_input: int, **extra) -> dict:
        """Check the accounting, rename the shards into place and write the manifest (last)."""
        if self.kept + self.rejected != n_input:
            raise AssertionError(
                f"{self.stage} {self.output.name}: kept {self.kept} + rejected {self.rejected} != input {n_input}"
            )
        self._rejects.close()  # first: a reject row that cannot be written must not leave the kept file in place
        self._kept.close()
        manifest = {
            "stage": self.stage,
            "textmill_version": __version__,
            "output": self.output.name,
            "params": self.params,
            "inputs": [file_fingerprint(p) for p in self.inputs],
            "counts": {"input": n_input, "kept": self.kept, "rejected": self.rejected, "output_rows": self._kept.rows},
            "bytes": self.output.stat().st_size,
            "reasons": dict(sorted(self.reasons.items())),
            "seconds": round(time.perf_counter() - self._started, 3),
            **extra,
        }
        write_json(manifest, manifest_path(self.output))
        self._finished = True
        return manifest


def list_shards(inputs: Iterable[str | Path]) -> list[Path]:
    """Resolve files and directories to the sorted list of data shards (NAME.parquet, or loose JSON
    NAME.jsonl, NAME.jsonl.gz, ...; an earlier layout's sidecars such as NAME.rejects.parquet are skipped).

    In a directory a stage wrote (it holds manifests), every data shard must have its manifest, whole: a
    shard without one was left by a killed run (or its manifest was damaged) and must not be read as if it
    were complete.
    """
    shards: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            stage_dir = (path / ".manifests").is_dir() or any(path.glob("*.manifest.json"))
            # A stage's kept shards are Parquet, or datatrove's JSON lines (--output-format jsonl.gz).
            suffixes = (".parquet", ".jsonl.gz") if stage_dir else (".parquet", *LOOSE_JSON_SUFFIXES)
            found = sorted(p for p in path.iterdir()
                           if p.name.lower().endswith(suffixes) and _SHARD_NAME.match(shard_stem(p)))
            if stage_dir:
                unfinished = [p.name for p in found if read_json_record(earlier_or_current(manifest_path(p)),
                                                                        "its shard counts as unfinished") is None]
                if unfinished:
                    raise TextmillError(
                        f"{path}: shard(s) {', '.join(unfinished[:3])} have no whole manifest (an interrupted run, "
                        "or a damaged file); re-run the stage that writes them"
                    )
            shards.extend(found)
        elif path.is_file():
            shards.append(path)
        else:
            raise missing_input(path)
    if not shards:
        raise TextmillError(f"no shards (*.parquet, *.jsonl, *.jsonl.gz) found in {', '.join(map(str, inputs))}")
    return shards


SHARD_KINDS = {"URL": (URL_SCHEMA, "`textmill blacklist` writes them; scrape reads them"),
               "document": (DOC_SCHEMA, "`textmill scrape` and the stages after it write them")}


def shard_kind(schema: pa.Schema) -> str | None:
    """"URL" or "document" for a shard with every column of that kind (with its type; a column added since
    may be missing), else None."""
    for kind, (expected, _) in SHARD_KINDS.items():
        if all(schema.field(f.name).type == f.type if f.name in schema.names else f.name in LATER_COLUMNS
               for f in expected):
            return kind
    return None


def holds_records(schema: pa.Schema) -> bool:
    """Whether a Parquet file that is no shard of textmill's holds documents all the same: a string `text`
    column (datatrove's and Dolma's Parquet: `id`, `text`, `metadata`)."""
    return "text" in schema.names and schema.field("text").type in (pa.string(), pa.large_string())


def document_table(table: pa.Table) -> pa.Table:
    """A document shard's table with DOC_SCHEMA's columns (null where an older shard lacks a later one)."""
    for name in LATER_COLUMNS:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, DOC_SCHEMA.field(name).type))
    return table.select(DOC_SCHEMA.names).cast(DOC_SCHEMA)


def read_rows(shard: Path, columns: list[str] | None = None, kind: str | None = None) -> Iterator[dict]:
    """Stream a shard's rows as dicts, one row group at a time (bounded memory). With `kind` ("URL" or
    "document"), a shard of another kind or schema is one error naming what it holds and what is wanted;
    a damaged file is one error, wherever in the file the damage is."""
    try:
        reader = pq.ParquetFile(shard)
    except (pa.ArrowInvalid, OSError) as exc:
        raise TextmillError(f"cannot read Parquet shard {shard}: {exc}") from None
    wanted = kind is not None and columns is None
    missing = [n for n in LATER_COLUMNS if n not in reader.schema_arrow.names] if wanted else []
    if kind is not None and shard_kind(reader.schema_arrow) != kind:
        found = shard_kind(reader.schema_arrow)
        holds = f"{found} rows" if found else f"columns {', '.join(reader.schema_arrow.names)}"
        expected, who = SHARD_KINDS[kind]
        raise TextmillError(f"{shard} holds {holds}, not {kind} rows ({', '.join(expected.names)}; {who})")
    try:
        for batch in parquet_batches(reader, _WRITE_BATCH_ROWS, columns):
            for row in batch.to_pylist():
                yield {**row, **dict.fromkeys(missing)} if missing else row
    except (pa.ArrowException, OSError) as exc:
        raise TextmillError(f"{shard} is damaged ({str(exc).splitlines()[0][:200]}); write it again by re-running "
                            "the stage that made it") from None


def summarize(manifests: list[dict]) -> dict:
    """Add up the counts and reasons of several shard manifests of one stage."""
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for m in manifests:
        counts.update(m["counts"])
        reasons.update(m["reasons"])
    return {"shards": len(manifests), "counts": dict(counts), "reasons": dict(reasons.most_common())}
