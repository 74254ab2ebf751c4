"""URL lists cut into units of work of at most `urls_per_shard` lines, whatever files the user brings.

Megatron-LM's OpenWebText recipe ends with one `clean_urls.txt` of about 20 million URLs. A unit is a
range of its lines (`clean_urls-00042`: lines 420,001 to 430,000 with 10,000 a unit), and every stage after
the blacklist works per unit, so one big list gives as many tasks as its size calls for and no task holds
more than a unit. (The name has a dash, not a dot: a dot in a shard's name reads as a sidecar's kind.)

Cutting a list is one pass over it (decompressed, when it is .gz, .bz2 or .xz) that finds each unit's
byte range and hashes its bytes. A unit's hash keys its work, so a line appended to the last list leaves
every earlier unit as it was, and a changed line changes its own unit's hash only. The cut is remembered
per file (path, size, modification time and unit size) in this process and in TEXTMILL_CACHE, so the
graph of a run, built by every worker, reads a 20-million-URL list once per machine.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import hashlib
import json
import lzma
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from textmill.errors import TextmillError
from textmill.io.files import atomic_path
from textmill.io.store import cache_root, fetch
from textmill.pipeline.shards import safe_shard_name

OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
_BLOCK = 1 << 24  # bytes read at a time while cutting
_CUT_VERSION = 1  # bumped when the cut or its record changes, so a cached cut is made again


@dataclass(frozen=True)
class UrlUnit:
    """Lines first_line .. first_line + lines - 1 of the URL list `path` (its decompressed bytes
    offset .. offset + size - 1, whose sha256 is `sha256`)."""

    path: Path
    number: int
    first_line: int
    lines: int
    offset: int
    size: int
    sha256: str

    @property
    def name(self) -> str:
        """The unit's shard name in every stage: its list's name and its number in the list."""
        return f"{url_list_name(self.path)}-{self.number:05d}"

    def shown(self) -> str:
        return f"{self.path.name} lines {self.first_line}-{self.first_line + max(self.lines, 1) - 1}"

    def record(self) -> dict:
        """What a manifest says of the unit it came from."""
        return {"list": self.path.name, "number": self.number, "first_line": self.first_line, "lines": self.lines,
                "sha256": self.sha256}


def url_list_name(path: Path) -> str:
    """RS_2011-01.bz2.deduped.txt -> RS_2011-01_bz2_deduped: a list's name, before its units' numbers."""
    name = path.name
    for suffix in OPENERS:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    if name.lower().endswith(".txt"):
        name = name[:-4]
    return safe_shard_name(name)


def open_url_list(path: Path) -> BinaryIO:
    """A URL list's bytes, decompressed when its name ends in .gz, .bz2 or .xz."""
    return OPENERS.get(path.suffix.lower(), open)(path, "rb")


def url_units(path: Path, urls_per_shard: int) -> tuple[UrlUnit, ...]:
    """The units of a URL list, in order (at least one: an empty list is one empty unit)."""
    local = fetch(Path(path))
    stat = local.stat()
    return _units(str(local), stat.st_size, stat.st_mtime_ns, urls_per_shard)


@functools.lru_cache(maxsize=4096)
def _units(path: str, size: int, mtime_ns: int, urls_per_shard: int) -> tuple[UrlUnit, ...]:
    stamp = f"{_CUT_VERSION} {path} {size} {mtime_ns} {urls_per_shard}"
    cached = cache_root() / "url-units" / f"{hashlib.sha256(stamp.encode()).hexdigest()[:32]}.json"
    try:
        record = json.loads(cached.read_text())
        if record["stamp"] == stamp:
            return tuple(UrlUnit(path=Path(path), **unit) for unit in record["units"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not cut on this machine yet, or a damaged record: cut again
    units = cut_url_list(Path(path), urls_per_shard)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(cached) as tmp:
            tmp.write_text(json.dumps({"stamp": stamp, "units": [
                {k: v for k, v in asdict(unit).items() if k != "path"} for unit in units]}))
    except OSError:
        pass  # a cache that cannot be written costs a second pass, nothing else
    return units


def cut_url_list(path: Path, urls_per_shard: int) -> tuple[UrlUnit, ...]:
    """One pass over the list: a unit every `urls_per_shard` lines (a last line without a newline counts)."""
    units: list[UrlUnit] = []
    digest, start, start_line, lines, position = hashlib.sha256(), 0, 1, 0, 0

    def close(end: int) -> None:
        nonlocal digest, start, start_line, lines
        units.append(UrlUnit(path, len(units), start_line, lines, start, end - start, digest.hexdigest()))
        digest, start, start_line, lines = hashlib.sha256(), end, start_line + lines, 0

    last = b"\n"
    try:
        with open_url_list(path) as f:
            for block in iter(lambda: f.read(_BLOCK), b""):
                newlines = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)
                taken = 0  # bytes of the block already hashed into a closed unit
                while newlines.size and lines + newlines.size >= urls_per_shard:
                    end = int(newlines[urls_per_shard - lines - 1]) + 1
                    digest.update(block[taken:end])
                    newlines = newlines[urls_per_shard - lines:]
                    lines = urls_per_shard
                    close(position + end)
                    taken = end
                digest.update(block[taken:])
                lines += newlines.size
                position += len(block)
                last = block[-1:]
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise TextmillError(f"cannot read URL list {path}: {exc}") from None
    if last != b"\n":
        lines += 1  # the last line has no newline
    if lines or not units:
        close(position)
    return tuple(units)


def read_unit_lines(unit: UrlUnit) -> Iterator[tuple[int, bytes]]:
    """(line number in its list, raw line without its line end) of each line of a unit."""
    try:
        with open_url_list(unit.path) as f:
            if unit.path.suffix.lower() in OPENERS:
                _skip(f, unit.offset)  # a compressed stream cannot seek: read up to the unit
            else:
                f.seek(unit.offset)
            data = f.read(unit.size)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise TextmillError(f"cannot read URL list {unit.path}: {exc}") from None
    if len(data) != unit.size or hashlib.sha256(data).hexdigest() != unit.sha256:
        raise TextmillError(f"URL list {unit.path} changed while it was being read ({unit.shown()}); run again")
    lines = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        lines.pop()  # the empty piece after the last line end (or of no data)
    for lineno, line in enumerate(lines, unit.first_line):
        yield lineno, line.rstrip(b"\r")


def _skip(f: BinaryIO, count: int) -> None:
    while count > 0:
        block = f.read(min(count, _BLOCK))
        if not block:
            raise EOFError(f"the stream ended {count} bytes before the unit")
        count -= len(block)
