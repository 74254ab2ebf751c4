"""The synthetic web as a web archive: a WARC file of a crawl of it, for the demo, the tests and the benchmarks,
written by textmill.pipeline.warc_records (one gzip member a record). Each listed page is a request and
a response record, as a crawler writes them, at a fixed time, so the same web gives the same bytes; pages that
never answer (hang, drip) are left out, as a crawler has nothing to store for them."""

from __future__ import annotations

from pathlib import Path

from textmill.demo.synthweb import SyntheticWeb
from textmill.pipeline.warc_records import request_record, response_record

CRAWLED_AT = "2024-03-01T00:00:00Z"


def write_archive(web: SyntheticWeb, base: str, path: Path, paths: list[str] | None = None) -> Path:
    """`web`'s pages (those of `paths`, else every listed one) as crawled at `base` (http://host:port) into `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for route in web.url_paths if paths is None else paths:
            page = web.pages[route]
            if page.behaviour != "static":
                continue
            url = base + route
            f.write(request_record(url, CRAWLED_AT, "textmill-demo"))
            headers = [("Content-Type", page.content_type), ("Content-Length", str(len(page.body)))]
            if page.location:
                headers.append(("Location", page.location))
            f.write(response_record(url, CRAWLED_AT, page.status, headers, page.body))
    return path
