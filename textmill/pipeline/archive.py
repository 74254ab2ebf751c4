"""URLs looked up in a web archive before they are fetched ([scrape] archive_index): each URL's newest capture
(status 200) is found in a CDX index, and only its record is read, by an HTTP range request into its WARC file (or
a seek into a local one); a URL the archive lacks is fetched live, or, with archive_fallback off, rejected as
not_in_archive. A URL found in the archive is never fetched live.

The index is a CDXJ file (or a folder of them), each line `SURT-KEY TIMESTAMP {json}` in SURT order with the
capture's `url`, `status`, `mime`, `filename`, `offset` and `length` (as Common Crawl's and pywb's are), searched
by bisection without being read whole; or an index server's API (pywb's, Common Crawl's: `INDEX?url=URL&output=json`),
asked once a URL. A capture counts only when its own URL is the one looked up (both normalised as the blacklist
normalises), so a SURT key written by another canonicaliser can miss a capture, never take a wrong one. WARC files
are named relative to archive_prefix: an http(s) URL (Common Crawl's https://data.commoncrawl.org/) or a folder.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from textmill.errors import TextmillError
from textmill.pipeline.blacklist import normalize_url
from textmill.pipeline.fetch import HTML_TYPES, Fetched


@dataclass(frozen=True)
class Capture:
    """A capture the index names: where its record lies and when it was made (YYYYMMDDhhmmss)."""

    url: str
    timestamp: str
    filename: str
    offset: int
    length: int

    def fetched_at(self) -> str:
        t = self.timestamp.ljust(14, "0")
        return f"{t[0:4]}-{t[4:6]}-{t[6:8]}T{t[8:10]}:{t[10:12]}:{t[12:14]}Z"


def surt_key(url: str) -> str:
    """The SURT form an index is sorted by: the host's labels reversed without `www`, `)`, then the path and the
    query, its parameters sorted, all lower-cased (com,example)/path?a=1&b=2)."""
    parts = urlsplit(url)
    labels = (parts.hostname or "").split(".")
    host = ",".join(reversed(labels[1:] if labels[0] == "www" else labels))
    if parts.port:
        host += f":{parts.port}"
    query = "&".join(sorted(parts.query.split("&"))) if parts.query else ""
    return f"{host}){parts.path or '/'}{'?' + query if query else ''}".lower()


def newest(url: str, entries) -> Capture | None:
    """The newest capture with status 200 among index entries (dicts, with their timestamps) of `url`."""
    found = None
    for entry in entries:
        if str(entry.get("status")) != "200" or normalize_url(str(entry.get("url", "")))[0] != url:
            continue
        capture = Capture(url, str(entry["timestamp"]), entry["filename"], int(entry["offset"]), int(entry["length"]))
        if found is None or capture.timestamp > found.timestamp:
            found = capture
    return found


def archive_index(cfg, session):
    """The index [scrape] archive_index names: a server's API (asked through `session`) or CDXJ files."""
    if cfg.archive_index.startswith(("http://", "https://")):
        return CdxServer(cfg.archive_index, session)
    return CdxjFiles.of(Path(cfg.archive_index))


class CdxjFiles:
    """CDXJ files on this machine, searched by bisection (a file is opened per lookup, never read whole)."""

    def __init__(self, files: list[Path]):
        self.files = files

    @classmethod
    def of(cls, path: Path) -> "CdxjFiles":
        files = sorted(p for p in path.iterdir() if p.suffix == ".cdxj") if path.is_dir() else [path]
        if not files or not all(p.is_file() for p in files):
            raise TextmillError(f"[scrape] archive_index {path}: no CDXJ index there (a .cdxj file, or a folder of them)")
        return cls(files)

    async def lookup(self, url: str) -> Capture | None:
        return await asyncio.to_thread(self.lookup_now, url)

    def lookup_now(self, url: str) -> Capture | None:
        key = surt_key(url)
        return newest(url, (entry for path in self.files for entry in _entries(path, key)))


def _entries(path: Path, key: str):
    """The entries of a sorted CDXJ file whose key is `key`, from the first line at or after it (bisection)."""
    wanted = key.encode()
    with open(path, "rb") as f:

        def line_from(position: int) -> bytes:
            """The first line that starts at `position` or after it, the file left just past it."""
            f.seek(max(position - 1, 0))
            if position:
                f.readline()  # the rest of the line holding position - 1
            return f.readline()

        low, high = 0, f.seek(0, os.SEEK_END)
        while low < high:  # the least position whose next line has a key >= wanted
            middle = (low + high) // 2
            line = line_from(middle)
            if line and line.split(b" ", 1)[0] < wanted:
                low = middle + 1
            else:
                high = middle
        line = line_from(low)
        while line:
            found_key, timestamp, rest = line.rstrip(b"\n").split(b" ", 2)
            if found_key > wanted:
                return
            if found_key == wanted:
                yield {**json.loads(rest), "timestamp": timestamp.decode()}
            line = f.readline()


class CdxServer:
    """An index server's API (pywb's, Common Crawl's), asked once a URL."""

    def __init__(self, endpoint: str, session):
        self.endpoint, self.session = endpoint, session

    async def lookup(self, url: str) -> Capture | None:
        async with self.session.get(f"{self.endpoint}?url={quote(url, safe='')}&output=json") as response:
            if response.status == 404:  # "No Captures found"
                return None
            if response.status != 200:
                raise OSError(f"the index server answered {response.status}")
            text = await response.text()
        return newest(url, (json.loads(line) for line in text.splitlines() if line.strip()))


async def read_capture(capture: Capture, prefix: str, session, max_bytes: int) -> Fetched:
    """The capture's record, read alone (a range request, or a seek), as the fetch of its URL would have gone:
    its status, Content-Type and body (its transfer and content encodings undone, at most max_bytes)."""
    from fastwarc.warc import ArchiveIterator

    if prefix.startswith(("http://", "https://")):
        headers = {"Range": f"bytes={capture.offset}-{capture.offset + capture.length - 1}"}
        async with session.get(prefix + capture.filename, headers=headers) as response:
            if response.status != 206:
                raise OSError(f"{prefix + capture.filename}: a range request answered {response.status}")
            data = await response.read()
    else:
        data = await asyncio.to_thread(_read_range, Path(prefix) / capture.filename, capture.offset, capture.length)
    if len(data) != capture.length:
        raise OSError(f"{capture.filename}: {len(data)} of the capture's {capture.length} bytes")
    try:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise OSError(f"{capture.filename} at {capture.offset}: not a whole gzip member ({exc})") from None
    for record in ArchiveIterator(io.BytesIO(data), parse_http=True, auto_decode="all", fsspec_args=False):
        if record.http_headers is None:
            break
        return archived_response(record, capture.url, max_bytes)
    raise OSError(f"{capture.filename} at {capture.offset}: no HTTP response record there")


def archived_response(record, url: str, max_bytes: int) -> Fetched:
    """A WARC response record (FastWARC's, its HTTP parsed) as the fetch of `url` would have gone: its status, and
    its Content-Type and body (encodings undone, at most max_bytes) or the reason the page is not taken
    (broken_response, status=, content_type=, too_large), as the live fetch judges a response."""
    http = record.http_headers
    if http is None:
        return Fetched(url, reason="broken_response")
    if http.status_code != 200:
        return Fetched(url, http.status_code, reason=f"status={http.status_code}")
    content_type = http.get("Content-Type")
    mime = (content_type or "").split(";")[0].strip().lower()
    if mime not in HTML_TYPES:
        return Fetched(url, http.status_code, reason=f"content_type={mime or 'missing'}")
    body = record.reader.read(max_bytes + 1)
    if len(body) > max_bytes:
        return Fetched(url, http.status_code, reason="too_large")
    return Fetched(url, http.status_code, body, content_type=content_type)


def _read_range(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def cdxj_lines(warc: Path, filename: str) -> list[str]:
    """The CDXJ lines of a WARC file's response records, sorted, each naming the file `filename` (its path under
    the archive's prefix): what an index of it holds."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    records = [(r.stream_pos, r.record_type, r.headers.get("WARC-Target-URI"), r.headers.get("WARC-Date"),
                r.http_headers) for r in ArchiveIterator(str(warc), parse_http=True, fsspec_args=False)]
    ends = [position for position, *_ in records[1:]] + [warc.stat().st_size]
    lines = []
    for (offset, kind, url, date, http), end in zip(records, ends, strict=True):
        if kind != WarcRecordType.response or http is None:
            continue
        timestamp = "".join(c for c in date if c.isdigit())[:14]
        entry = {"url": url, "mime": (http.get("Content-Type") or "").split(";")[0].strip(),
                 "status": str(http.status_code), "length": str(end - offset), "offset": str(offset),
                 "filename": filename}
        lines.append(f"{surt_key(normalize_url(url)[0] or url)} {timestamp} {json.dumps(entry)}")
    return sorted(lines)
