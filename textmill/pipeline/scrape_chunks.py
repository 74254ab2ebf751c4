"""The scrape's progress, committed a chunk of URLs at a time, so that a scrape resumed on another machine
fetches at most the chunks that were not committed, and no part of a scrape holds more than a chunk.

Each finished URL's entry (its row, reject reason, kept HTML, ...) is appended to its chunk's journal
beside the output (`.NAME.chunk-00003-TAG.journal.jsonl`), so a crash loses nothing on this machine. When
every URL of a chunk is done, the chunk is written whole (`.chunks/NAME/00003-TAG.parquet`), handed to
`save` (the task commits it to WORK), and its journal goes. TAG names the scrape's settings: a stage
command's output folder is not keyed by them, and a chunk fetched with other settings is not reused.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from textmill.errors import TextmillError
from textmill.io.files import atomic_path
from textmill.pipeline.shards import record_path, shard_stem
from textmill.pipeline.stage_configs import ScrapeConfig

# A committed chunk: each URL's journal entry as JSON, in input order.
CHUNK_SCHEMA = pa.schema([("position", pa.int64()), ("entry", pa.string())])


def chunks_folder(output: Path) -> Path:
    """Where the scrape of shard `output` commits its progress: .chunks/NAME/ beside it."""
    return record_path(output.parent, "chunks") / shard_stem(output)


def chunk_path(output: Path, number: int, tag: str) -> Path:
    """Chunk `number` of the scrape with settings `tag` (a stage command's output folder is not keyed by
    them: a chunk fetched with other settings is not reused)."""
    return chunks_folder(output) / f"{number:05d}-{tag}.parquet"


def _journal_path(output: Path, number: int, tag: str) -> Path:
    return output.with_name(f".{output.stem}.chunk-{number:05d}-{tag}.journal.jsonl")


def settings_tag(cfg: ScrapeConfig) -> str:
    return hashlib.sha256(json.dumps(cfg.params(), sort_keys=True, default=str).encode()).hexdigest()[:12]


def _read_journal(path: Path) -> dict[int, dict]:
    """Finished URLs of a chunk by position, from an earlier, interrupted run on this machine; a torn last
    line is ignored (and re-fetched)."""
    done: dict[int, dict] = {}
    if path.exists():
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                done[entry["position"]] = entry
    return done


def _ends_a_line(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, 2)
        return f.read(1) == b"\n"


class Chunks:
    """The scrape's progress, a chunk of `size` URLs at a time: each finished URL's entry goes to its
    chunk's journal; a chunk whose every URL is done is written whole and handed to `save` (committed)."""

    def __init__(self, output: Path, total: int, cfg: ScrapeConfig, save: Callable[[Path], None]):
        self.output, self.total, self.size, self.save = output, total, cfg.chunk_urls, save
        self.tag = settings_tag(cfg)
        self.count = max(1, -(-total // self.size))
        self.committed = {k for k in range(self.count) if self.path(k).exists()}
        self.done: dict[int, int] = {}  # journaled URLs per open chunk
        self.journaled: set[int] = set()  # positions journaled in open chunks (at most the open chunks' URLs)
        self.files: dict[int, object] = {}
        for k in range(self.count):
            if k not in self.committed:
                entries = _read_journal(self.journal(k))
                self.done[k] = len(entries)
                self.journaled.update(entries)
                self._commit_if_whole(k)

    def path(self, k: int) -> Path:
        return chunk_path(self.output, k, self.tag)

    def journal(self, k: int) -> Path:
        return _journal_path(self.output, k, self.tag)

    def length(self, k: int) -> int:
        return min(self.size, self.total - k * self.size) if self.total else 0

    def pending(self, position: int) -> bool:
        return position // self.size not in self.committed and position not in self.journaled

    def finished(self) -> int:
        """URLs finished before this run: in committed chunks or journaled."""
        return sum(self.length(k) for k in self.committed) + len(self.journaled)

    def add(self, position: int, entry: dict) -> None:
        k = position // self.size
        if k not in self.files:
            self.files[k] = open(self.journal(k), "a", encoding="utf-8")
            if self.files[k].tell() and not _ends_a_line(self.journal(k)):
                self.files[k].write("\n")  # after a line torn by a crash (or a full disk), not glued to it
        self.files[k].write(json.dumps({"position": position, **entry}, ensure_ascii=False) + "\n")
        self.files[k].flush()
        self.done[k] += 1
        self._commit_if_whole(k)

    def _commit_if_whole(self, k: int) -> None:
        if self.done.get(k) != self.length(k):
            return
        if k in self.files:
            self.files.pop(k).close()
        journal = self.journal(k)
        entries = sorted(_read_journal(journal).values(), key=lambda e: e["position"])
        if len(entries) != self.length(k):  # a journal line lost: fetch the chunk's missing URLs in a rerun
            raise TextmillError(f"{journal} holds {len(entries)} of its chunk's {self.length(k)} URLs; run again")
        path = self.path(k)
        path.parent.mkdir(parents=True, exist_ok=True)
        table = pa.table({"position": [e["position"] for e in entries],
                          "entry": [json.dumps(e, ensure_ascii=False) for e in entries]}, schema=CHUNK_SCHEMA)
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        self.save(path)
        self.committed.add(k)
        self.journaled.difference_update(e["position"] for e in entries)
        del self.done[k]
        journal.unlink(missing_ok=True)

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        self.files.clear()

    def entries(self) -> Iterator[dict]:
        """Every URL's entry, in input order, a chunk in memory at a time."""
        for k in range(self.count):
            table = pq.read_table(self.path(k))
            for entry in table.column("entry").to_pylist():
                yield json.loads(entry)
