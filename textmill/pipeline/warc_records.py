"""Writing web archives: WARC/1.1 records, each its own gzip member (how .warc.gz files are written, so that a reader
can start at any record). The scrape archives what it fetched with them ([scrape] keep_warc); the demo and the
tests archive the synthetic web."""

from __future__ import annotations

import base64
import gzip
import hashlib
import uuid

HTTP_REASONS = {200: "OK", 301: "Moved Permanently", 302: "Found", 404: "Not Found", 500: "Internal Server Error"}


def http_response(status: int, headers: list[tuple[str, str]], body: bytes) -> bytes:
    """An HTTP/1.1 response as a WARC response record's block holds it: status line, headers, blank line, body."""
    head = [f"HTTP/1.1 {status} {HTTP_REASONS.get(status, 'Status')}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def sha1_digest(data: bytes) -> str:
    """A WARC digest as crawlers write it (wget, Heritrix, warcio): `sha1:` and the SHA-1 in base32."""
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


def warc_record(record_type: str, url: str, date: str, block: bytes, content_type: str,
                extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    """One WARC/1.1 record as its own gzip member (how .warc.gz files are written, so a reader can start at any
    record), with `extra` headers. Its WARC-Record-ID is derived from what it holds, and gzip's header has no
    time: the same record gives the same bytes."""
    record_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{record_type} {url} {date} {hashlib.sha1(block).hexdigest()}")
    headers = [("WARC-Type", record_type), ("WARC-Record-ID", f"<urn:uuid:{record_id}>"), ("WARC-Date", date),
               ("WARC-Target-URI", url), ("WARC-Block-Digest", sha1_digest(block)), *extra,
               ("Content-Type", content_type), ("Content-Length", str(len(block)))]
    text = "WARC/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return gzip.compress(text.encode("utf-8") + block + b"\r\n\r\n", mtime=0)


def response_record(url: str, date: str, status: int, headers: list[tuple[str, str]], body: bytes) -> bytes:
    """A response record of a fetch: `url` answered `status` with `headers` and `body` at `date` (ISO 8601, UTC).
    Its payload's type is the one the server declared (Common Crawl's WARC-Identified-Payload-Type, which readers
    such as datatrove's filter on, is what its crawler detected)."""
    declared = next((v.split(";")[0].strip().lower() for k, v in headers if k.lower() == "content-type"), "")
    extra = (("WARC-Payload-Digest", sha1_digest(body)),) + ((("WARC-Identified-Payload-Type", declared),) if declared else ())
    return warc_record("response", url, date, http_response(status, headers, body), "application/http; msgtype=response",
                       extra)


def request_record(url: str, date: str, user_agent: str) -> bytes:
    """The request record of a GET of `url` at `date`, as the fetch sent it."""
    parts = url.split("/", 3)
    target = "/" + (parts[3] if len(parts) > 3 else "")
    block = f"GET {target} HTTP/1.1\r\nHost: {parts[2]}\r\nUser-Agent: {user_agent}\r\n\r\n".encode("utf-8")
    return warc_record("request", url, date, block, "application/http; msgtype=request")
