"""An HTTP response as a web archive stores it (a WARC response record's block), read as warcio reads one and as
the live fetch judges one, within bounds whatever the record holds.

- The status line and headers: at most MAX_HEADER_BYTES of them (100,000 header lines are a `broken_response`, not
  the archive's end); lines may end in CRLF or a bare LF (ClueWeb09's do); a status line that does not parse is a
  `broken_response`.
- The body as stored: at most 2 x max_bytes + MAX_HEADER_BYTES are read (a record declaring more is `too_large`,
  read past in pieces by the archive reader, never held).
- `Transfer-Encoding: chunked` is undone; a body whose first chunk header is not one (a proxy recorder stored it
  de-chunked, as pywb does) is taken as it is, as warcio takes it; a chunk header that breaks part-way ends the
  body there.
- `Content-Encoding` gzip, deflate or br is undone up to max_bytes + 1 bytes (a bomb is never inflated past the
  limit: `too_large`); a body that does not decode from its first byte is taken as stored (recorded decoded under
  its header, warcio's reading); one that breaks part-way is a `broken_response`; one cut short (a crawler's
  truncated record) gives what decodes. Another coding is left as it is, as the live fetch leaves it.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

MAX_HEADER_BYTES = 64 * 1024
_BLANK_LINE = re.compile(rb"\n\r?\n")
_STATUS_LINE = re.compile(rb"HTTP/[0-9](?:\.[0-9])?[ \t]+([0-9]{3})(?:[ \t].*)?")
_CHUNK_SIZE = re.compile(rb"[ \t]*([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?\r?")


@dataclass(frozen=True)
class StoredResponse:
    """What a record's HTTP message gives: its status and headers (names lower-cased, the first of each), and its
    decoded body; `reason` when it gives no body: broken_response or too_large."""

    status: int | None
    headers: dict[str, str]
    body: bytes | None = None
    reason: str | None = None


def stored_response(reader, max_bytes: int, with_body=lambda status, headers: True) -> StoredResponse:
    """The HTTP response in a record's block (`reader.read(n)`, as FastWARC's record reader reads); its body is
    read only when `with_body(status, headers)` says so (a page the caller rejects by its headers is not read)."""
    start = reader.read(MAX_HEADER_BYTES + 4)
    blank = _BLANK_LINE.search(start)  # the end of the header block
    if blank is None and len(start) > MAX_HEADER_BYTES:
        return StoredResponse(None, {}, reason="broken_response")
    end, raw = (blank.start(), start[blank.end():]) if blank else (len(start), b"")  # or a message of headers alone
    lines = re.split(rb"\r?\n", start[:end])
    match = _STATUS_LINE.fullmatch(lines[0].rstrip(b"\r"))
    if not match:
        return StoredResponse(None, {}, reason="broken_response")
    status, headers = int(match[1]), _headers(lines[1:])
    if not with_body(status, headers):
        return StoredResponse(status, headers)
    raw_limit = 2 * max_bytes + MAX_HEADER_BYTES
    raw += reader.read(raw_limit + 1 - len(raw)) if len(raw) <= raw_limit else b""
    if len(raw) > raw_limit:
        return StoredResponse(status, headers, reason="too_large")
    if "chunked" in _tokens(headers.get("transfer-encoding", "")):
        raw = _dechunked(raw)
    body = raw
    for coding in reversed(_tokens(headers.get("content-encoding", ""))):
        body = _decoded(body, coding, max_bytes)
        if body is None:
            return StoredResponse(status, headers, reason="broken_response")
    if len(body) > max_bytes:
        return StoredResponse(status, headers, reason="too_large")
    return StoredResponse(status, headers, body)


def _headers(lines: list[bytes]) -> dict[str, str]:
    headers: dict[str, str] = {}
    last = None
    for line in lines:
        text = line.rstrip(b"\r").decode("latin-1")
        if text[:1] in (" ", "\t") and last is not None:  # an obsolete folded line continues the header before it
            headers[last] += " " + text.strip()
            continue
        name, colon, value = text.partition(":")
        if colon and name.strip():
            last = name.strip().lower()
            headers.setdefault(last, value.strip())
    return headers


def _tokens(value: str) -> list[str]:
    return [token.strip().lower() for token in value.split(",") if token.strip()]


def _dechunked(raw: bytes) -> bytes:
    """A chunked body's data; the body as it is when its first chunk header is not one (stored de-chunked)."""
    out, position = [], 0
    while True:
        line_end = raw.find(b"\n", position)
        match = _CHUNK_SIZE.fullmatch(raw, position, line_end) if line_end >= 0 else None
        if match is None:
            return raw if position == 0 else b"".join(out)
        size = int(match[1], 16)
        start = line_end + 1
        if size == 0:
            return b"".join(out)
        if start + size > len(raw):  # a size past the body: stored de-chunked, or cut short
            return raw if position == 0 else b"".join(out) + raw[start:]
        out.append(raw[start:start + size])
        position = start + size
        position += 2 if raw[position:position + 2] == b"\r\n" else 1 if raw[position:position + 1] == b"\n" else 0


def _decoded(body: bytes, coding: str, max_bytes: int) -> bytes | None:
    """`body` with one content coding undone, at most max_bytes + 1 bytes of it (what a truncated body holds when it
    is cut short); `body` as it is when nothing of it decodes; None when it breaks after a good start."""
    if coding in ("gzip", "x-gzip", "deflate"):
        # a gzip or a zlib stream (47 tells them apart), or deflate sent raw, as some servers send it
        decoders = [lambda data, limit, wbits=wbits: zlib.decompressobj(wbits).decompress(data, limit) for wbits in (47, -15)]
        errors: type[Exception] = zlib.error
    elif coding == "br":
        import brotli

        decoders, errors = [lambda data, limit: brotli.Decompressor().process(data, output_buffer_limit=limit)], brotli.error
    else:
        return body  # identity, or a coding the live fetch would not undo either
    for decode in decoders:
        try:
            return decode(body, max_bytes + 1)
        except errors:
            continue
    for decode in decoders:  # none decodes it whole: does any decode its start?
        try:
            if decode(body[:1024], 1):
                return None
        except errors:
            continue
    return body
