"""Input files cut into units of work of bounded size, whatever files the user brings.

Megatron-LM's OpenWebText recipe ends with one `clean_urls.txt` of about 20 million URLs; a team's
document export is often one JSON-lines file of tens of GB. A unit is a range of a file's lines (a URL list,
JSON lines) or rows (Parquet): `clean_urls-00042` holds lines 420,001 to 430,000 with 10,000 a unit. Every
stage works per unit, so one big file gives as many tasks as its size calls for and no task holds more
than a unit. (The name has a dash, not a dot: a dot in a shard's name reads as a sidecar's kind.)

Cutting a text file is one pass over it (decompressed, when it is .gz, .bz2 or .xz) that finds each
unit's byte range and hashes its bytes. A unit's hash keys its work, so a line appended to the last URL
list leaves every earlier unit as it was, and a changed line changes its own unit's hash only. The cut is
remembered per file (path, size, modification time and unit size) in this process and in TEXTMILL_CACHE,
so the graph of a run, built by every worker, reads a 20-million-URL list once per machine. A compressed
stream cannot seek, so the cut of a .gz, .bz2 or .xz file also keeps each unit's decompressed bytes in
TEXTMILL_CACHE (named by their hash): reading a unit then reads its copy, not the file from its start
(unit after unit, that would be quadratic in the file's size). A Parquet file's rows are counted from
its footer, with no pass.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import hashlib
import json
import lzma
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

import numpy as np
import pyarrow.parquet as pq

from textmill.errors import TextmillError
from textmill.io.files import atomic_path, file_fingerprint, given_files, is_loose_json
from textmill.io.store import cache_root, fetch
from textmill.pipeline.shards import safe_shard_name, shard_stem

OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
_BLOCK = 1 << 24  # bytes read at a time while cutting
_CUT_VERSION = 2  # bumped when the cut or its record changes, so a cached cut is made again


@dataclass(frozen=True)
class FileUnit:
    """Unit `number` of the file `path`, named after the file's `stem`."""

    path: Path
    stem: str
    number: int

    @property
    def name(self) -> str:
        """The unit's shard name in every stage: its file's name and its number in the file."""
        return f"{self.stem}-{self.number:05d}"


@dataclass(frozen=True)
class LineUnit(FileUnit):
    """Lines first_line .. first_line + lines - 1 of a text file (its decompressed bytes offset .. offset +
    size - 1, whose sha256 is `sha256`)."""

    first_line: int
    lines: int
    offset: int
    size: int
    sha256: str

    def shown(self) -> str:
        return f"{self.path.name} lines {self.first_line}-{self.first_line + max(self.lines, 1) - 1}"

    def record(self) -> dict:
        """What a manifest says of the unit it came from."""
        return {"list": self.path.name, "number": self.number, "first_line": self.first_line, "lines": self.lines,
                "sha256": self.sha256}


@dataclass(frozen=True)
class RowUnit(FileUnit):
    """Rows first_row .. first_row + rows - 1 of a Parquet file (whose sha256 is `sha256`)."""

    first_row: int
    rows: int
    sha256: str

    def shown(self) -> str:
        return f"{self.path.name} rows {self.first_row}-{self.first_row + max(self.rows, 1) - 1}"


def url_list_name(path: Path) -> str:
    """RS_2011-01.bz2.deduped.txt -> RS_2011-01_bz2_deduped: a list's name, before its units' numbers
    (LIST.txt, LIST.jsonl, each compressed or not: LIST)."""
    name = path.name
    for suffix in OPENERS:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    for suffix in (".txt", ".jsonl"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return safe_shard_name(name)


def open_url_list(path: Path) -> BinaryIO:
    """A URL list's bytes, decompressed when its name ends in .gz, .bz2 or .xz."""
    return OPENERS.get(path.suffix.lower(), open)(path, "rb")


def url_units(path: Path, urls_per_shard: int) -> tuple[LineUnit, ...]:
    """The units of a URL list, in order (at least one: an empty list is one empty unit)."""
    return line_units(Path(path), urls_per_shard, url_list_name(Path(path)))


def document_units(path: Path, documents_per_shard: int) -> tuple[LineUnit | RowUnit, ...] | tuple[Path]:
    """The units of a document file given to a stage command (loose JSON lines by lines, Parquet by rows),
    or the file itself when it is no bigger than one unit (read in place, named as it is)."""
    path = Path(path)
    if is_loose_json(path):
        units = line_units(path, documents_per_shard, shard_stem(path))
    else:
        rows = pq.ParquetFile(fetch(path)).metadata.num_rows
        sha256 = file_fingerprint(path)["sha256"]
        units = tuple(RowUnit(path, shard_stem(path), n, start, min(documents_per_shard, rows - start), sha256)
                      for n, start in enumerate(range(0, rows, documents_per_shard)))
    return units if len(units) > 1 else (path,)


def line_units(path: Path, per_unit: int, stem: str) -> tuple[LineUnit, ...]:
    """The units of a text file of at most `per_unit` lines each, in order (at least one)."""
    return cached_cut(path, per_unit, stem, "lines")


def cached_cut(path: Path, per_unit: int, stem: str, kind: str) -> tuple[FileUnit, ...]:
    """A file's units of `kind` ("lines": LineUnit, "warc": WarcUnit), cut once per file and machine."""
    local = fetch(path)
    stat = local.stat()
    # The cut is cached under what a file's edit always changes: the size and modification time can be put back
    # (`cp -p`, `rsync -t`, touch -r), the inode's change time (ctime) cannot, short of the clock.
    return _units(str(local), stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns, per_unit, stem, kind)


@functools.lru_cache(maxsize=4096)
def _units(path: str, size: int, mtime_ns: int, inode: int, ctime_ns: int, per_unit: int,
           stem: str, kind: str) -> tuple[FileUnit, ...]:
    stamp = f"{_CUT_VERSION} {kind} {path} {size} {mtime_ns} {inode} {ctime_ns} {per_unit} {stem}"
    cached = cache_root() / "url-units" / f"{hashlib.sha256(stamp.encode()).hexdigest()[:32]}.json"
    try:
        record = json.loads(cached.read_text())
        if record["stamp"] == stamp:
            return tuple(UNIT_KINDS[kind](path=Path(path), stem=stem, **unit) for unit in record["units"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not cut on this machine yet, or a damaged record: cut again
    units = (cut_lines if kind == "lines" else cut_warc)(Path(path), per_unit, stem)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(cached) as tmp:
            tmp.write_text(json.dumps({"stamp": stamp, "units": [
                {k: v for k, v in asdict(unit).items() if k not in ("path", "stem")} for unit in units]}))
    except OSError:
        pass  # a cache that cannot be written costs a second pass, nothing else
    return units


def cut_lines(path: Path, per_unit: int, stem: str) -> tuple[LineUnit, ...]:
    """One pass over the file: a unit every `per_unit` lines (a last line without a newline counts). A
    compressed file's units are kept decompressed on the way (kept_copy)."""
    units: list[LineUnit] = []
    digest, start, start_line, lines, position = hashlib.sha256(), 0, 1, 0, 0
    held: list[bytes] | None = [] if path.suffix.lower() in OPENERS else None  # the unit's bytes, to keep

    def take(data: bytes) -> None:
        digest.update(data)
        if held is not None:
            held.append(data)

    def close(end: int) -> None:
        nonlocal digest, start, start_line, lines
        units.append(LineUnit(path, stem, len(units), start_line, lines, start, end - start, digest.hexdigest()))
        if held is not None:
            keep_copy(b"".join(held), units[-1].sha256)
            held.clear()
        digest, start, start_line, lines = hashlib.sha256(), end, start_line + lines, 0

    last = b"\n"
    try:
        with open_url_list(path) as f:
            for block in iter(lambda: f.read(_BLOCK), b""):
                newlines = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)
                taken = 0  # bytes of the block already hashed into a closed unit
                while newlines.size and lines + newlines.size >= per_unit:
                    end = int(newlines[per_unit - lines - 1]) + 1
                    take(block[taken:end])
                    newlines = newlines[per_unit - lines:]
                    lines = per_unit
                    close(position + end)
                    taken = end
                take(block[taken:])
                lines += newlines.size
                position += len(block)
                last = block[-1:]
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        raise TextmillError(f"cannot read {path}: {exc}") from None
    if last != b"\n":
        lines += 1  # the last line has no newline
    if lines or not units:
        close(position)
    return tuple(units)


@dataclass(frozen=True)
class WarcUnit(FileUnit):
    """Records first_record .. first_record + records - 1 of a WARC file (1 is its first), at its bytes offset ..
    offset + size - 1 (whole records: each gzip member of a .warc.gz is one), whose sha256 is `sha256`."""

    first_record: int
    records: int
    offset: int
    size: int
    sha256: str

    def shown(self) -> str:
        return f"{self.path.name} records {self.first_record}-{self.first_record + max(self.records, 1) - 1}"

    def record(self) -> dict:
        return {"warc": self.path.name, "number": self.number, "first_record": self.first_record,
                "records": self.records, "sha256": self.sha256}


WARC_SUFFIXES = (".warc", ".warc.gz")


def warc_files(given: Iterable[Path]) -> list[Path]:
    """Web archives given directly, and the *.warc.gz and *.warc files inside given directories, sorted."""
    return given_files(given, WARC_SUFFIXES, "web archives")


def warc_units(path: Path, responses_per_unit: int) -> tuple[WarcUnit, ...]:
    """The units of a WARC file, in order, each with at most `responses_per_unit` response records (and the other
    records among them), at least one."""
    name = Path(path).name
    for suffix in (".gz", ".warc"):
        name = name[: -len(suffix)] if name.lower().endswith(suffix) else name
    return cached_cut(Path(path), responses_per_unit, safe_shard_name(name), "warc")


def cut_warc(path: Path, responses_per_unit: int, stem: str) -> tuple[WarcUnit, ...]:
    """One pass over a WARC file (FastWARC), every record's block read to its end: a unit starts at every
    `responses_per_unit`-th response record (the first at the file's start). Its bytes are hashed in a second,
    raw pass. A record cut short (a truncated or damaged file, which WARC readers end on without a word) is an
    error. Read in FastWARC's quirks mode, as warcio reads: bytes between a record's declared end and the next
    record (a Content-Length short of its block) are stepped over, not the end of the file."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    from textmill.pipeline.archive_formats import what_it_is

    said = what_it_is(path)  # first: FastWARC's quirks mode reads an ARC file as no records, without a word
    if said:
        raise TextmillError(said)
    starts, records, responses = [(0, 1)], 0, 0  # (byte offset, number of its first record)
    try:
        for record in ArchiveIterator(str(path), parse_http=False, fsspec_args=False, quirks_mode=True):
            records, last = records + 1, record.stream_pos
            if record.record_type == WarcRecordType.response:
                if responses and responses % responses_per_unit == 0:
                    starts.append((record.stream_pos, records))
                responses += 1
            if record.reader.consume() != record.content_length:
                raise TextmillError(f"{path}: the record at byte {record.stream_pos} is cut short (a truncated or "
                                    "damaged archive)")
        if records and not _ends_whole(path, last):
            raise TextmillError(f"{path}: the record at byte {last} is cut short (a truncated or damaged archive)")
    except OSError as exc:
        raise TextmillError(f"cannot read {path} as WARC: {exc}") from None
    ends = [offset for offset, _ in starts[1:]] + [path.stat().st_size]
    counts = [first for _, first in starts[1:]] + [records + 1]
    units = []
    with open(path, "rb") as f:
        for number, ((offset, first), end, after) in enumerate(zip(starts, ends, counts, strict=True)):
            digest, remaining = hashlib.sha256(), end - offset
            f.seek(offset)
            while remaining:
                block = f.read(min(_BLOCK, remaining))
                if not block:
                    raise TextmillError(f"{path} changed while it was being cut into units; run again")
                digest.update(block)
                remaining -= len(block)
            units.append(WarcUnit(path, stem, number, first, after - first, offset, end - offset, digest.hexdigest()))
    return tuple(units)


def _ends_whole(path: Path, last: int) -> bool:
    """Whether the file's last record, at byte `last`, ends as a record must: its gzip member whole (a .warc.gz),
    or the two line ends after its block (a .warc). A reader takes a record whose block is all there as whole."""
    with open(path, "rb") as f:
        if not path.name.lower().endswith(".gz"):
            f.seek(max(last, path.stat().st_size - 4))
            return f.read() == b"\r\n\r\n"
        f.seek(last)
        member = zlib.decompressobj(31)
        for block in iter(lambda: f.read(_BLOCK), b""):
            while block and not member.eof:  # a block at a time out too: a 1 GiB record of zeros is 1 MB in
                member.decompress(block, _BLOCK)
                block = member.unconsumed_tail
            if member.eof:
                return not member.unused_data and not f.read(1)
    return False


UNIT_KINDS = {"lines": LineUnit, "warc": WarcUnit}


def kept_copy(sha256: str) -> Path:
    """Where the cut of a compressed file keeps a unit's decompressed bytes, named by their hash."""
    return cache_root() / "url-units" / "copies" / sha256


def keep_copy(data: bytes, sha256: str) -> None:
    try:
        copy = kept_copy(sha256)
        if not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(copy) as tmp:
                tmp.write_bytes(data)
    except OSError:
        pass  # a copy that cannot be kept costs reading the file from its start, nothing else


def read_unit_bytes(unit: LineUnit) -> bytes:
    """A unit's bytes (decompressed), checked against its hash: of a compressed file, its kept copy when
    this machine has it whole, else the stream read up to the unit."""
    compressed = unit.path.suffix.lower() in OPENERS
    try:
        data = kept_copy(unit.sha256).read_bytes() if compressed else None
    except OSError:
        data = None
    if data is not None and hashlib.sha256(data).hexdigest() == unit.sha256:
        return data
    try:
        with open_url_list(unit.path) as f:
            if compressed:
                _skip(f, unit.offset)  # a compressed stream cannot seek: read up to the unit
            else:
                f.seek(unit.offset)
            data = f.read(unit.size)
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        raise TextmillError(f"cannot read {unit.path}: {exc}") from None
    if len(data) != unit.size or hashlib.sha256(data).hexdigest() != unit.sha256:
        raise TextmillError(f"{unit.path} changed while it was being read ({unit.shown()}); run again")
    return data


def read_unit_lines(unit: LineUnit) -> Iterator[tuple[int, bytes]]:
    """(line number in its file, raw line without its line end) of each line of a unit."""
    data = read_unit_bytes(unit)
    lines = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        lines.pop()  # the empty piece after the last line end (or of no data)
    for lineno, line in enumerate(lines, unit.first_line):
        yield lineno, line.rstrip(b"\r")


def write_unit(unit: LineUnit | RowUnit, output: Path) -> Path:
    """A unit of a document file as a file of its own, in its file's format (JSON lines decompressed;
    Parquet with its file's schema, a row group at a time), then where it came from (unit_origin), last;
    returns that record's path."""
    with atomic_path(output) as tmp:
        if isinstance(unit, LineUnit):
            tmp.write_bytes(read_unit_bytes(unit))
        else:
            source = pq.ParquetFile(fetch(unit.path))
            end, start = unit.first_row + unit.rows, 0
            with pq.ParquetWriter(tmp, source.schema_arrow, compression="zstd") as writer:
                for group in range(source.num_row_groups):
                    rows = source.metadata.row_group(group).num_rows
                    if start < end and start + rows > unit.first_row:
                        table = source.read_row_group(group)
                        writer.write_table(table.slice(max(unit.first_row - start, 0), end - max(start, unit.first_row)))
                    start += rows
    first = unit.first_line if isinstance(unit, LineUnit) else unit.first_row + 1
    origin = origin_path(output)
    origin.parent.mkdir(exist_ok=True)
    with atomic_path(origin) as tmp:
        tmp.write_text(json.dumps({"file": unit.path.name, "first": first}))
    return origin


def origin_path(unit_file: Path) -> Path:
    return unit_file.parent / ".origins" / f"{shard_stem(unit_file)}.json"


def unit_origin(path: Path) -> tuple[str, int]:
    """The file a document file was cut from and the number of its first line or row (records without an id
    are named by them, as in the file), or its own name and 1 when it was not cut."""
    try:
        origin = json.loads(origin_path(path).read_text())
        return origin["file"], origin["first"]
    except FileNotFoundError:
        return path.name, 1


def _skip(f: BinaryIO, count: int) -> None:
    while count > 0:
        block = f.read(min(count, _BLOCK))
        if not block:
            raise EOFError(f"the stream ended {count} bytes before the unit")
        count -= len(block)
