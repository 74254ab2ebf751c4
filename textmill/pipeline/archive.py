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

What an index or an archive answers is checked before it is used: a capture's timestamp is 4 to 14 ASCII digits,
its offset and length whole numbers of at most 18 digits, its file a relative path that stays under archive_prefix
(no `..`, no absolute path, no link out of a local prefix); a record longer than max_bytes allows is a `too_large`
page unread, and a gzip member is inflated only up to that size. An answer that may pass (the index server or the
WARC host unreachable, 429, 5xx) is asked again as the live fetch is (retries, with backoff or Retry-After). Then
an index that gave no usable answer leaves the URL to the live fetch (or, with archive_fallback off, rejects it
as `archive_error=<what>`), and a capture that cannot be read is rejected as `archive_error=<what>`: one URL's
reject, never the shard's end.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import aiohttp

from textmill.errors import TextmillError
from textmill.io.numbers import whole_number
from textmill.pipeline.blacklist import normalize_url
from textmill.pipeline.fetch import HTML_TYPES, Fetched, backoff_wait, body_at_most, retry_after
from textmill.pipeline.stored_http import stored_response

# A record holds its page's body and its WARC and HTTP headers: what a record may take beyond max_bytes.
RECORD_HEADROOM = 1 << 20
# The most an index server's answer for one URL may hold (Common Crawl's are a few KB a capture).
MAX_INDEX_ANSWER = 16 << 20
_TIMESTAMP = re.compile(r"[0-9]{4,14}")


class ArchiveError(Exception):
    """An index answer or a capture textmill cannot use; `what` is the URL's reject, archive_error=<what>.
    `transient`: it may pass when asked again (after `retry_after` seconds, when the server said)."""

    def __init__(self, what: str, transient: bool = False, retry_after: float | None = None):
        super().__init__(what)
        self.what, self.transient, self.retry_after = what, transient, retry_after


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
    """The newest capture with status 200 among index entries (dicts, with their timestamps) of `url`. An entry
    that is not an object, or a capture of the URL whose fields do not have their shapes, is passed over; when
    nothing else is left, the URL's answer is ArchiveError("bad_capture")."""
    found, bad = None, 0
    for entry in entries:
        if not isinstance(entry, dict):
            bad += 1
            continue
        if str(entry.get("status")) != "200" or normalize_url(str(entry.get("url", "")))[0] != url:
            continue
        capture = typed_capture(url, entry)
        if capture is None:
            bad += 1
        elif found is None or capture.timestamp > found.timestamp:
            found = capture
    if found is None and bad:
        raise ArchiveError("bad_capture")
    return found


def typed_capture(url: str, entry: dict) -> Capture | None:
    """The capture an index entry names, or None when a field is missing or not of its shape."""
    timestamp, filename = entry.get("timestamp"), entry.get("filename")
    offset, length = _whole(entry.get("offset")), _whole(entry.get("length"))
    if not (isinstance(timestamp, str) and _TIMESTAMP.fullmatch(timestamp) and safe_filename(filename)):
        return None
    if offset is None or not length:
        return None
    return Capture(url, timestamp, filename, offset, length)


def _whole(value: object) -> int | None:
    """A CDX number (JSON's or a string of digits, as pywb and Common Crawl write them), at most 18 digits."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value < 10**18 else None
    return whole_number(value) if isinstance(value, str) else None


def safe_filename(name: object) -> bool:
    """A WARC file's name as an index may give it: a relative path under the prefix, of printable characters,
    without `..`, a leading `/`, a backslash or a scheme."""
    return (isinstance(name, str) and 0 < len(name) <= 4096 and name.isprintable() and not name.startswith("/")
            and "\\" not in name and "://" not in name and ".." not in name.split("/"))


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
            found_key, *fields = line.rstrip(b"\n").split(b" ", 2)
            if found_key > wanted:
                return
            if found_key == wanted:
                yield _entry(fields)
            line = f.readline()


def _entry(fields: list[bytes]) -> dict | None:
    """A CDXJ line's timestamp and JSON as one entry; None for a line that is not `KEY TIMESTAMP {json}`."""
    if len(fields) != 2:
        return None
    try:
        entry = json.loads(fields[1])
    except (ValueError, RecursionError):
        return None
    return {**entry, "timestamp": fields[0].decode("ascii", "replace")} if isinstance(entry, dict) else None


class CdxServer:
    """An index server's API (pywb's, Common Crawl's), asked once a URL."""

    def __init__(self, endpoint: str, session):
        self.endpoint, self.session = endpoint, session

    async def lookup(self, url: str) -> Capture | None:
        try:
            async with self.session.get(f"{self.endpoint}?url={quote(url, safe='')}&output=json") as response:
                if response.status == 404:  # "No Captures found"
                    return None
                if response.status != 200:
                    raise status_error("index", response)
                text = await bounded_body(response, MAX_INDEX_ANSWER, "index_answer_too_large")
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ArchiveError("index_unreachable", transient=True) from exc
        return newest(url, (_answer_line(line) for line in text.splitlines() if line.strip()))


def _answer_line(line: bytes) -> object:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def status_error(what: str, response) -> ArchiveError:
    """An answer of another status than asked for: worth asking again when it is 429 or 5xx."""
    status = response.status
    return ArchiveError(f"{what}_status_{status}", transient=status == 429 or status >= 500,
                        retry_after=retry_after(response.headers.get("Retry-After")))


async def bounded_body(response, limit: int, too_large: str) -> bytes:
    """A response's body, or ArchiveError(too_large) as soon as it passes `limit` bytes."""
    body = await body_at_most(response, limit)
    if body is None:
        raise ArchiveError(too_large)
    return body


class Archive:
    """The archive of a shard's scrape: its index, where its WARC files are, and what to do when it fails."""

    def __init__(self, cfg, session):
        self.cfg, self.session = cfg, session
        self.index = archive_index(cfg, session)

    async def page(self, url: str) -> tuple[Fetched | None, Capture | None]:
        """What the archive gives for `url`: (its page or its reject, the capture), or (None, None) when the URL is
        to be fetched live (the archive lacks it, or its index could not answer, with archive_fallback on)."""
        try:
            capture = await self.asking(url, lambda: self.index.lookup(url))
        except ArchiveError as exc:
            return (None, None) if self.cfg.archive_fallback else (Fetched(url, reason=f"archive_error={exc.what}"), None)
        if capture is None:
            return (None, None) if self.cfg.archive_fallback else (Fetched(url, reason="not_in_archive"), None)
        try:
            got = await self.asking(url, lambda: read_capture(capture, self.cfg.archive_prefix, self.session,
                                                              self.cfg.max_bytes))
        except ArchiveError as exc:
            got = Fetched(url, reason=f"archive_error={exc.what}")
        return got, capture

    async def asking(self, url: str, ask):
        """`ask()`, asked again after an ArchiveError that may pass, as the live fetch tries a URL again."""
        rng = random.Random(url)
        for attempt in range(self.cfg.retries + 1):
            try:
                return await ask()
            except ArchiveError as exc:
                if not exc.transient or attempt == self.cfg.retries:
                    raise
                await asyncio.sleep(backoff_wait(self.cfg, attempt, rng, exc.retry_after))
        raise AssertionError("unreachable")


async def read_capture(capture: Capture, prefix: str, session, max_bytes: int) -> Fetched:
    """The capture's record, read alone (a range request, or a seek), as the fetch of its URL would have gone:
    its status, Content-Type and body (its transfer and content encodings undone, at most max_bytes); a record
    longer than a page of max_bytes can be is `too_large`, unread. What cannot be read raises ArchiveError."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    limit = max_bytes + RECORD_HEADROOM
    if capture.length > limit:
        return Fetched(capture.url, reason="too_large")
    if prefix.startswith(("http://", "https://")):
        data = await _read_remote(prefix + capture.filename, capture, session)
    else:
        data = await asyncio.to_thread(_read_local, Path(prefix), capture)
    if data[:2] == b"\x1f\x8b":
        data = _inflated(data, limit)
        if data is None:
            return Fetched(capture.url, reason="too_large")
    for record in ArchiveIterator(io.BytesIO(data), parse_http=False, fsspec_args=False):
        if record.record_type != WarcRecordType.response:
            break
        return archived_response(record, capture.url, max_bytes)
    raise ArchiveError("no_response_record")


async def _read_remote(url: str, capture: Capture, session) -> bytes:
    headers = {"Range": f"bytes={capture.offset}-{capture.offset + capture.length - 1}"}
    try:
        async with session.get(url, headers=headers) as response:
            if response.status != 206:
                raise status_error("warc", response)
            data = await bounded_body(response, capture.length, "longer_than_its_capture")
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise ArchiveError("warc_unreachable", transient=True) from exc
    if len(data) != capture.length:
        raise ArchiveError("cut_short", transient=True)
    return data


def _read_local(prefix: Path, capture: Capture) -> bytes:
    """The capture's bytes from a WARC file under `prefix`, which it must not leave (by `..` or a link)."""
    root = prefix.resolve()
    path = (root / capture.filename).resolve()
    if root not in path.parents:
        raise ArchiveError("outside_prefix")
    try:
        with open(path, "rb") as f:
            f.seek(capture.offset)
            data = f.read(capture.length)
    except FileNotFoundError:
        raise ArchiveError("missing_file") from None
    except OSError as exc:
        raise ArchiveError("unreadable_file") from exc
    if len(data) != capture.length:
        raise ArchiveError("cut_short")
    return data


def _inflated(data: bytes, limit: int) -> bytes | None:
    """A record's gzip member inflated, or None when it inflates past `limit` (a bomb is never inflated whole)."""
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error:
        raise ArchiveError("not_gzip") from None
    if len(out) > limit:
        return None
    if not inflater.eof:
        raise ArchiveError("cut_short")
    return out


def archived_response(record, url: str, max_bytes: int) -> Fetched:
    """A WARC response record (FastWARC's, read with parse_http=False) as the fetch of `url` would have gone: its
    status, and its Content-Type and body (encodings undone, at most max_bytes) or the reason the page is not
    taken (broken_response, status=, content_type=, too_large), as the live fetch judges a response. Whatever the
    record holds, it is this page's answer (textmill.pipeline.stored_http), never the archive's end."""

    def wanted(status: int, headers: dict[str, str]) -> bool:  # a page rejected by its headers is not read
        return status == 200 and _mime(headers) in HTML_TYPES

    got = stored_response(record.reader, max_bytes, wanted)
    if got.reason:
        return Fetched(url, got.status, reason=got.reason)
    if got.status != 200:
        return Fetched(url, got.status, reason=f"status={got.status}")
    if _mime(got.headers) not in HTML_TYPES:
        return Fetched(url, got.status, reason=f"content_type={_mime(got.headers) or 'missing'}")
    return Fetched(url, got.status, got.body, content_type=got.headers.get("content-type"))


def _mime(headers: dict[str, str]) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()


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
