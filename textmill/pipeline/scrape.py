"""Scraping, after OpenWebText's download.py: fetch each URL of a URL shard (textmill.pipeline.fetch), extract
title and text, and keep per-URL metadata.

`concurrency` URLs are in flight at once; a URL whose host has all its `per_host_concurrency` slots in use
waits aside while URLs of other hosts go ahead (HostQueue), so a list dominated by a few hosts does not leave
workers waiting on them. Each page is decoded (textmill.pipeline.charset), then extracted
(textmill.pipeline.extract, newspaper3k or trafilatura) in worker processes, so the event loop keeps fetching
while pages are parsed, within `extract_timeout_s` of CPU time per page, or it is rejected as
`extraction_timeout`.

With an archive index ([scrape] archive_index; textmill.pipeline.archive), a URL the archive holds is read from its
capture's record instead of fetched; with keep_warc, every page fetched is also archived as WARC records.

Resumable, and bounded in memory whatever the shard's size: the URLs are read from the shard as they are
fetched, and every `chunk_urls` of them are committed as a chunk (textmill.pipeline.scrape_chunks): a
rerun after a crash fetches only URLs with no journal line on this machine, a rerun on another machine,
which has only WORK, at most the chunks that were not committed. The shard is then written from the
chunks, one at a time, in input order.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from itertools import chain
from pathlib import Path
from typing import Callable, Iterable, Iterator
from urllib.parse import urlsplit

import aiohttp
import pyarrow as pa
import pyarrow.parquet as pq

from textmill.errors import TextmillError
from textmill.io.files import PendingFile
from textmill.io.progress import progress
from textmill.pipeline.archive import Archive
from textmill.pipeline.charset import decode_html
from textmill.pipeline.extract import ExtractionFailed, ExtractionTimeout, ExtractorPool, extract, failure_text
from textmill.pipeline.fetch import Fetched, GuardedResolver, Hosts, HostQueue
from textmill.pipeline.shards import (
    DOC_SCHEMA,
    ShardOutput,
    ShardWriter,
    earlier_or_current,
    read_rows,
    rejects_path,
    shard_stem,
    sidecar_path,
)
from textmill.pipeline.scrape_chunks import Chunks
from textmill.pipeline.warc_records import request_record, response_record
from textmill.pipeline.stage_configs import ScrapeConfig

HTML_SCHEMA = pa.schema([("id", pa.string()), ("final_url", pa.string()), ("html", pa.binary()),
                         ("content_type", pa.string())])


def looks_binary(body: bytes) -> bool:
    """Binary data served as text/html: NUL bytes, or many control bytes, in the first 8 KiB."""
    head = body[:8192]
    if b"\x00" in head:
        return True
    control = sum(1 for b in head if b < 9 or 13 < b < 32)
    return control > len(head) // 20


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _scrape_pending(
    queue: Iterator[tuple[int, dict]], cfg: ScrapeConfig, pool: ExtractorPool | None, chunks: Chunks, fetched
) -> None:
    resolver = GuardedResolver(cfg)
    # Connections are kept for the host's next URL (a TLS handshake a URL on https otherwise), and its address
    # for five minutes: the resolver checked it once.
    connector = aiohttp.TCPConnector(limit=cfg.concurrency, resolver=resolver, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=cfg.connect_timeout_s, sock_read=cfg.read_timeout_s)

    async with aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        headers={"User-Agent": cfg.user_agent},
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
    ) as session:

        hosts = Hosts(session, resolver, cfg)
        urls = HostQueue(queue, hosts, aside=4 * cfg.concurrency)
        # The archive is a host the user named (perhaps on a private network): asked without the address guard.
        archive_session = aiohttp.ClientSession(timeout=timeout, trust_env=False) if cfg.archive_index else None
        archive = Archive(cfg, archive_session) if cfg.archive_index else None

        async def worker() -> None:
            while (item := await urls.next()) is not None:
                position, url_row = item
                started = time.perf_counter()
                tries, (got, capture) = 0, await archive.page(url_row["url"]) if archive else (None, None)
                if got is None and cfg.robots_txt and not await hosts.allowed(url_row["url"]):
                    got = Fetched(url_row["url"], reason="robots_disallowed")
                elif got is None:  # not read from an archive
                    got, tries = await hosts.fetch_retrying(url_row["url"])
                row = {
                    "id": url_row["id"],
                    "url": url_row["url"],
                    "final_url": got.final_url,
                    "domain": urlsplit(got.final_url).hostname,
                    "status": got.status,
                    "title": None,
                    "text": None,
                    "word_count": None,
                    "elapsed_s": None,
                    "fetched_at": None,
                    "metadata": url_row["metadata"],
                }
                reason, charset = got.reason, None
                if reason is None and looks_binary(got.body):
                    reason = "binary_content"
                if reason is None:
                    fields, reason, charset = await asyncio.get_running_loop().run_in_executor(
                        None, extracted, pool, got.final_url, got.body, got.content_type, cfg.extractor)
                    row.update(fields)
                row.update(elapsed_s=round(time.perf_counter() - started, 4),
                           fetched_at=capture.fetched_at() if capture else _now())
                keep_body = cfg.keep_html or cfg.keep_warc
                raw = got.body.decode("latin-1") if keep_body and got.body is not None else None
                chunks.add(position, {"row": row, "reason": reason, "html": raw, "charset": charset,
                                      "content_type": got.content_type, "tries": tries, "archived": bool(capture)})
                fetched.update(1)

        try:
            await asyncio.gather(*(worker() for _ in range(cfg.concurrency)))
        finally:
            if archive_session:
                await archive_session.close()


def extracted(pool: ExtractorPool | None, url: str, body: bytes, content_type: str | None,
              extractor: str) -> tuple[dict, str | None, str]:
    """A fetched page decoded and extracted: its title, text and word count, its reject reason (None when
    kept) and how it was decoded. Run in a thread: `pool` gives each page a deadline (None: no deadline)."""
    html, charset = decode_html(body, content_type)
    try:
        title, text = pool.extract(url, html, extractor) if pool else extract(url, html, extractor)
    except ExtractionTimeout:
        title, text, reason = "", "", "extraction_timeout"
    except ExtractionFailed as exc:
        title, text, reason = "", "", f"extraction_failed={exc}"
    except Exception as exc:  # in a thread: a page the extractor cannot parse is a reject, not a crash
        title, text, reason = "", "", f"extraction_failed={failure_text(exc)}"
    else:
        reason = None if text.strip() else "empty_extraction"
    return {"title": title, "text": text, "word_count": len(text.split())}, reason, charset


@contextmanager
def extraction_pool(cfg: ScrapeConfig) -> Iterator[ExtractorPool | None]:
    """The extractor in `cfg.extract_workers` processes, each page under `cfg.extract_timeout_s`; with 0
    workers, None: threads of this process, where nothing can stop a page that never finishes (for
    trusted pages only: tests)."""
    pool = ExtractorPool(cfg.extract_workers, cfg.extract_timeout_s) if cfg.extract_workers > 0 else None
    try:
        yield pool
    finally:
        if pool:
            pool.close()


def scrape_shard(url_shard: Path, output: Path, cfg: ScrapeConfig,
                 save_progress: Callable[[Path], None] = lambda chunk: None) -> dict:
    """Fetch and extract every URL of `url_shard` into the document shard `output`; returns its manifest.
    Each finished chunk of `cfg.chunk_urls` URLs is handed to `save_progress` (the task commits it to WORK).

    The extractor runs as `extraction_pool` says."""
    total = pq.ParquetFile(url_shard).metadata.num_rows
    output.parent.mkdir(parents=True, exist_ok=True)
    chunks = Chunks(output, total, cfg, save_progress)
    resumed = chunks.finished()
    queue = ((n, row) for n, row in enumerate(read_rows(url_shard, kind="URL"))
             if chunks.pending(n))
    try:
        with progress(total=total, initial=resumed, desc=f"scrape {url_shard.stem}", unit="url") as fetched:
            if resumed < total:
                with extraction_pool(cfg) as pool:
                    asyncio.run(_scrape_pending(queue, cfg, pool, chunks, fetched))
    finally:
        chunks.close()

    html_writer = ShardWriter(sidecar_path(output, "html"), HTML_SCHEMA) if cfg.keep_html else None
    archive = PendingFile(archive_path(output)) if cfg.keep_warc else None
    try:
        with ShardOutput("scrape", output, DOC_SCHEMA, [url_shard], cfg.params()) as stage:
            charsets: Counter[str] = Counter()
            retried = archived = 0
            for entry in chunks.entries():
                retried += max(entry.get("tries", 1) - 1, 0)
                archived += entry.get("archived", False)
                if entry["reason"]:
                    stage.reject(entry["row"], entry["reason"])
                else:
                    stage.keep(entry["row"])
                if entry.get("charset"):
                    charsets[entry["charset"]] += 1
                if entry["html"] is not None:
                    keep_page(entry, html_writer, archive, cfg.user_agent)
            for writer in (html_writer, archive):  # before the manifest: a finished shard has its HTML and archive
                if writer:
                    writer.close()
            extra = {"from_archive": archived} if cfg.archive_index else {}
            return stage.finish(total, resumed=resumed, charsets=dict(sorted(charsets.items())), retries=retried,
                                **extra)
    except BaseException:
        for writer in (html_writer, archive):
            if writer:
                writer.abort()
        raise


def keep_page(entry: dict, html_writer: ShardWriter | None, archive: PendingFile | None, user_agent: str) -> None:
    """A fetched page's body, into the kept HTML and the archive, as asked."""
    row, body = entry["row"], entry["html"].encode("latin-1")
    if html_writer:
        html_writer.write({"id": row["id"], "final_url": row["final_url"], "html": body,
                           "content_type": entry.get("content_type")})
    if archive:
        headers = [("Content-Type", entry["content_type"])] if entry.get("content_type") else []
        archive.write(request_record(row["final_url"], row["fetched_at"], user_agent),
                      response_record(row["final_url"], row["fetched_at"], row["status"],
                                      [*headers, ("Content-Length", str(len(body)))], body))


def archive_path(shard: Path) -> Path:
    """Where the scrape archives a shard's pages ([scrape] keep_warc): .warc/NAME.warc.gz."""
    return shard.parent / ".warc" / f"{shard_stem(shard)}.warc.gz"


def extract_shard(scraped: Path, output: Path, cfg: ScrapeConfig) -> dict:
    """The pages of a scraped shard extracted again by `cfg.extractor` from the HTML the scrape kept
    (keep_html), fetching nothing, into the document shard `output`: a page whose HTML was kept is kept or
    rejected by the new extraction; one without (its fetch failed) keeps its reject reason."""
    html_file = earlier_or_current(sidecar_path(scraped, "html"))
    if not html_file.exists():
        raise TextmillError(f"{scraped} has no kept HTML ({html_file}); scrape with --keep-html to extract "
                            "again without fetching")
    with_html = set(pq.read_table(html_file, columns=["id"]).column("id").to_pylist())

    def with_pages(rows: Iterator[tuple[dict, str | None]]) -> Iterator[tuple[dict, str | None, dict | None]]:
        """Each row with its kept page, if any: the pages were written in input order, as the kept rows and
        the rejects each are, so one pass over them serves each (never every page in memory)."""
        pages = read_rows(html_file)
        for row, reason in rows:
            yield row, reason, next(p for p in pages if p["id"] == row["id"]) if row["id"] in with_html else None

    kept = ((row, None) for row in read_rows(scraped, kind="document"))
    rejected = (({k: v for k, v in row.items() if k != "reason"}, row["reason"])
                for row in read_rows(earlier_or_current(rejects_path(scraped))))

    def again(item: tuple[dict, str | None, dict | None]) -> tuple[dict, str | None, str | None]:
        row, reason, page = item
        if page is None:
            return row, reason, None
        fields, reason, charset = extracted(pool, page["final_url"], page["html"], page.get("content_type"), cfg.extractor)
        return {**row, **fields}, reason, charset

    workers = max(cfg.extract_workers, 1)
    with extraction_pool(cfg) as pool, ThreadPoolExecutor(workers) as threads, \
            ShardOutput("extract", output, DOC_SCHEMA, [scraped, html_file], cfg.params()) as stage:
        pages = chain(with_pages(kept), with_pages(rejected))
        count, charsets = write_extracted(stage, ordered_map(threads, again, pages, 4 * workers))
        return stage.finish(count, charsets=charsets)


def write_extracted(stage: ShardOutput, results: Iterable[tuple[dict, str | None, str | None]]) -> tuple[int, dict]:
    """Each extracted page, (row, reject reason or None, how it was decoded), kept or rejected into `stage`; how
    many there were, and how many were decoded each way."""
    charsets: Counter[str] = Counter()
    count = 0
    for row, reason, charset in results:
        count += 1
        if charset:
            charsets[charset] += 1
        if reason:
            stage.reject(row, reason)
        else:
            stage.keep(row)
    return count, dict(sorted(charsets.items()))


def ordered_map(executor: ThreadPoolExecutor, function: Callable, items: Iterable, window: int) -> Iterator:
    """`executor.map` with at most `window` items taken at a time (Executor.map takes them all at once)."""
    pending: deque = deque()
    for item in items:
        pending.append(executor.submit(function, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()
