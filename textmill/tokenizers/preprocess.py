"""The tokenize stage, Megatron-LM's tools/preprocess_data.py: documents -> GPT-2 BPE ids -> .bin/.idx.

For each JSON key K it writes `<PREFIX>_<K>_document.bin/.idx` with one sequence per document, in input
order, the end-of-document id appended with `append_eod` (never to an empty document, which becomes a
document with no sequence, as in Megatron). Beside them go `<PREFIX>.rejects.jsonl` (each bad record, where
it was and why) and `<PREFIX>.manifest.json` (counts, parameters, input fingerprints), written last.

Speed: tiktoken encodes in Rust without the GIL, so worker *threads* encode batches of documents while the
main thread parses the next batch and writes the previous one; results are written in input order, so
the bytes do not depend on the number of workers.
"""

from __future__ import annotations

import json
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow.parquet as pq

from textmill.errors import TextmillError
from textmill.io.files import (
    atomic_path,
    file_fingerprint,
    is_loose_json,
    iter_json_lines,
    local_fingerprint,
    parquet_batches,
    write_json,
)
from textmill.io.progress import progress as progress_counter
from textmill.megatron.indexed import IndexedDatasetWriter, data_file_path, index_file_path, optimal_dtype
from textmill.tokenizers.gpt2 import GPT2Tokenizer
from textmill.tokenizers.tokenize_config import TokenizeConfig

_BATCH_BYTES = 1 << 20  # text handed to a worker at once: large enough to amortise, small enough to stream
_PARQUET_ROWS = 512


@dataclass
class Record:
    where: str  # "file:line" for JSON, "file:row N" for Parquet
    texts: list[str] | None  # one per JSON key, None when rejected
    reason: str | None
    nbytes: int
    raw: str = ""  # the start of a rejected line, to show the user


def dataset_prefix(output_prefix: str | Path, key: str) -> Path:
    """Megatron's output naming: `<prefix>_<key>_document` (document level, no sentence splitting)."""
    return Path(f"{output_prefix}_{key}_document")


def manifest_file(output_prefix: str | Path) -> Path:
    return Path(f"{output_prefix}.manifest.json")


def rejects_file(output_prefix: str | Path) -> Path:
    return Path(f"{output_prefix}.rejects.jsonl")


def _json_records(path: Path, keys: tuple[str, ...]) -> Iterator[Record]:
    for lineno, raw, obj, reason in iter_json_lines(path):
        where = f"{path.name}:{lineno}"
        if reason is None and not isinstance(obj, dict):
            reason = "not_an_object"
        elif reason is None:
            missing = [k for k in keys if k not in obj]
            wrong = [k for k in keys if k in obj and not isinstance(obj[k], str)]
            reason = f"missing_key={missing[0]}" if missing else f"non_string={wrong[0]}" if wrong else None
        if reason:
            yield Record(where, None, reason, len(raw), raw[:120].decode("utf-8", "replace"))
        else:
            yield Record(where, [obj[k] for k in keys], None, len(raw))


def _parquet_records(path: Path, keys: tuple[str, ...]) -> Iterator[Record]:
    pf = pq.ParquetFile(path)
    missing = [k for k in keys if k not in pf.schema_arrow.names]
    if missing:
        raise TextmillError(f"{path}: no column {missing[0]!r} (columns: {', '.join(pf.schema_arrow.names)})")
    row = 0
    for batch in parquet_batches(pf, _PARQUET_ROWS, list(keys)):
        columns = [batch.column(k).to_pylist() for k in keys]
        for texts in zip(*columns, strict=True):
            row += 1
            where = f"{path.name}:row {row}"
            bad = [k for k, t in zip(keys, texts, strict=True) if not isinstance(t, str)]
            if bad:
                yield Record(where, None, f"non_string={bad[0]}", 0)
            else:
                yield Record(where, list(texts), None, sum(len(t.encode("utf-8")) for t in texts))


def iter_records(paths: list[Path], keys: tuple[str, ...]) -> Iterator[Record]:
    for path in paths:
        yield from (_json_records if is_loose_json(path) else _parquet_records)(path, keys)


def input_bytes(paths: list[Path], keys: tuple[str, ...]) -> int:
    """Bytes the progress bar counts: file sizes for JSON, uncompressed key columns for Parquet."""
    total = 0
    for path in paths:
        if is_loose_json(path):
            total += path.stat().st_size
            continue
        meta = pq.ParquetFile(path).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            total += sum(group.column(c).total_uncompressed_size for c in range(group.num_columns)
                         if group.column(c).path_in_schema in keys)
    return total


def _encode_batch(tokenizer: GPT2Tokenizer, texts: list[str], wheres: list[str], eod: int | None,
                  dtype) -> tuple[np.ndarray, list[int]]:
    """Encode documents into one flat array plus their lengths (runs in a worker thread); a document the
    encoder fails on is one error that names it."""
    parts = []
    lengths = []
    eod_part = np.array([eod if eod is not None else 0], dtype=np.uint32)
    for text, where in zip(texts, wheres, strict=True):
        try:
            ids = tokenizer.encode_array(text)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # a Rust panic is a BaseException
            raise TextmillError(f"tokenize cannot encode the document at {where} ({type(exc).__name__}: "
                                f"{str(exc)[:200]}); no dataset written") from None
        parts.append(ids)
        if eod is not None and ids.size:  # Megatron appends no end-of-document token to an empty document
            parts.append(eod_part)
        lengths.append(ids.size + (eod is not None and ids.size > 0))
    flat = np.concatenate(parts) if parts else np.zeros(0, np.uint32)
    return flat.astype(dtype, copy=False), lengths


def _batches(records: Iterator[Record], rejects: list[Record]) -> Iterator[tuple[list[Record], int]]:
    """Good records grouped into batches of about _BATCH_BYTES; bad ones go to `rejects` on the way."""
    batch: list[Record] = []
    size = 0
    for rec in records:
        if rec.reason:
            rejects.append(rec)
            continue
        batch.append(rec)
        size += rec.nbytes
        if size >= _BATCH_BYTES:
            yield batch, size
            batch, size = [], 0
    if batch:
        yield batch, size


def tokenize_files(
    inputs: list[Path], output_prefix: str | Path, tokenizer: GPT2Tokenizer, cfg: TokenizeConfig, progress: bool = True
) -> dict:
    """Tokenize documents from loose JSON / Parquet files (in the given order) into one dataset per JSON
    key; returns the manifest. Nothing is left under the final names unless the whole run succeeded."""
    if not inputs:
        raise TextmillError("no input files to tokenize")
    started = time.perf_counter()
    manifest_file(output_prefix).unlink(missing_ok=True)  # until this run finishes, nothing here is complete
    keys = cfg.json_keys
    dtype = np.dtype(optimal_dtype(tokenizer.vocab_size))
    eod = tokenizer.eod if cfg.append_eod else None
    writers = [IndexedDatasetWriter(dataset_prefix(output_prefix, k), dtype) for k in keys]
    rejects: list[Record] = []
    docs = nbytes = 0
    tokens_by_key: Counter[str] = Counter()
    empty_by_key: Counter[str] = Counter()
    bar = progress_counter(total=input_bytes(inputs, keys), unit="B", unit_scale=True, desc="tokenize", enabled=progress)
    pending: deque = deque()
    last_where = "the start of the input"

    def write_oldest() -> None:
        nonlocal docs, nbytes, last_where
        batch, size, futures = pending.popleft()
        for key, writer, future in zip(keys, writers, futures, strict=True):
            flat, lengths = future.result()
            writer.add_documents(flat, lengths)
            tokens_by_key[key] += len(flat)
            empty_by_key[key] += lengths.count(0)
        docs += len(batch)
        nbytes += size
        last_where = batch[-1].where
        bar.update(size)
        elapsed = max(time.perf_counter() - started, 1e-9)
        bar.set_postfix_str(f"{docs / elapsed:,.0f} docs/s, {nbytes / 1e6 / elapsed:.1f} MB/s", refresh=False)

    try:
        with ThreadPoolExecutor(cfg.workers) as pool:
            for batch, size in _batches(iter_records(inputs, keys), rejects):
                wheres = [r.where for r in batch]
                futures = [pool.submit(_encode_batch, tokenizer, [r.texts[i] for r in batch], wheres, eod, dtype)
                           for i in range(len(keys))]
                pending.append((batch, size, futures))
                if len(pending) > 2 * cfg.workers:  # bounded read-ahead keeps memory flat
                    write_oldest()
            while pending:
                write_oldest()
        with atomic_path(rejects_file(output_prefix)) as tmp:
            with open(tmp, "w", encoding="utf-8") as f:
                for r in rejects:
                    f.write(json.dumps({"where": r.where, "reason": r.reason, "line": r.raw}, ensure_ascii=False) + "\n")
        for writer in writers:
            writer.finalize()
    except BaseException as exc:
        for writer in writers:
            writer.abort()
        if isinstance(exc, (TextmillError, KeyboardInterrupt)):
            raise
        raise TextmillError(f"tokenize stopped after {last_where} ({type(exc).__name__}: {exc}); no dataset written") from exc
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    manifest = {
        "stage": "tokenize",
        "outputs": [str(dataset_prefix(output_prefix, k)) for k in keys],
        "params": {
            "json_keys": list(keys),
            "append_eod": cfg.append_eod,
            "dtype": dtype.name,
            "vocab_size": tokenizer.vocab_size,
            "tokenizer_files": [file_fingerprint(p) for p in tokenizer.files],
        },
        "inputs": [file_fingerprint(p) for p in inputs],
        "counts": {"input": docs + len(rejects), "kept": docs, "rejected": len(rejects), "tokens": dict(tokens_by_key),
                   "empty_documents": dict(empty_by_key)},
        "reasons": dict(Counter(r.reason for r in rejects).most_common()),
        "first_rejects": [f"{r.where}: {r.reason}" for r in rejects[:20]],
        "seconds": round(seconds, 3),
        "mb_per_s": round(nbytes / 1e6 / max(seconds, 1e-9), 2),
        # each token file's size and sha256, hashed while it is fresh: a blend of many such files is checked against
        # these before training, without hashing every file again when it is built (the parts form's)
        "files": {path.name: {k: v for k, v in local_fingerprint(path).items() if k != "path"}
                  for key in keys for path in (data_file_path(dataset_prefix(output_prefix, key)),
                                               index_file_path(dataset_prefix(output_prefix, key)))},
    }
    write_json(manifest, manifest_file(output_prefix))
    return manifest
