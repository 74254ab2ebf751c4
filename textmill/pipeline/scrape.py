"""Scraping, after OpenWebText's download.py: fetch each URL of a URL shard, extract title and text, and
keep per-URL metadata.

Fetching is asyncio + aiohttp with a hard wall-clock deadline per URL (DNS, connect, redirects and the
whole body included, not just a socket timeout), a size cap counted on the decompressed body, bounded
redirects followed by hand so every hop is checked, and http/https only. Private, loopback and link-local
addresses are refused unless `allow_private_addresses` is set (tests and the demo serve from 127.0.0.1) or the address
is in one of `allow_networks` (a local mirror, say). The address checked is the one connected to: each hop's
URL is parsed once by yarl, the parser aiohttp itself uses, whose IDNA step turns full-width or circled
digits and ideographic full stops into ASCII (`１２７。０.０.①` is 127.0.0.1); an IP literal is checked on that
form, and every other host by the resolver aiohttp connects through.

A fetch that failed in a way that may pass (TRANSIENT: a connection error, a timeout, 429, 502, 503, 504)
is tried again up to `retries` times, after an exponential wait with seeded jitter or what Retry-After
asks; no more than `per_host_concurrency` URLs of one host are fetched at once; with `robots_txt`, a
page its host's robots.txt disallows is rejected unfetched.

Each page is decoded (textmill.pipeline.charset), then extracted (textmill.pipeline.extract, newspaper3k
or trafilatura) in worker processes, so the event loop keeps fetching while pages are parsed, with its
own hard deadline per page (`extract_timeout_s`): a worker that overruns is killed and replaced, and the
page is rejected as `extraction_timeout`.

Resumable, and bounded in memory whatever the shard's size: the URLs are read from the shard as they are
fetched, and every `chunk_urls` of them are committed as a chunk (textmill.pipeline.scrape_chunks): a
rerun after a crash fetches only URLs with no journal line on this machine, a rerun on another machine,
which has only WORK, at most the chunks that were not committed. The shard is then written from the
chunks, one at a time, in input order.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import socket
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from itertools import chain
from pathlib import Path
from typing import Callable, Iterable, Iterator
from urllib.parse import urljoin, urlsplit

import aiohttp
import pyarrow as pa
import pyarrow.parquet as pq
from yarl import URL

from textmill.errors import TextmillError
from textmill.io.progress import progress
from textmill.pipeline.charset import decode_html
from textmill.pipeline.extract import ExtractionFailed, ExtractionTimeout, ExtractorPool, extract, failure_text
from textmill.pipeline.shards import (
    DOC_SCHEMA,
    ShardOutput,
    ShardWriter,
    earlier_or_current,
    read_rows,
    rejects_path,
    sidecar_path,
)
from textmill.pipeline.robots import RobotRules
from textmill.pipeline.scrape_chunks import Chunks
from textmill.pipeline.stage_configs import ScrapeConfig

HTML_TYPES = ("text/html", "application/xhtml+xml")
REDIRECT_CODES = (301, 302, 303, 307, 308)
HTML_SCHEMA = pa.schema([("id", pa.string()), ("final_url", pa.string()), ("html", pa.binary()),
                         ("content_type", pa.string())])



class BlockedAddress(OSError):
    """Raised by the resolver for a host that resolves to a non-public address."""


class GuardedResolver(aiohttp.ThreadedResolver):
    """DNS that refuses hosts resolving to non-public addresses, so no hop of a redirect chain can
    reach an internal service; the addresses it checked are the ones aiohttp connects to."""

    def __init__(self, cfg: ScrapeConfig):
        super().__init__()
        self.cfg = cfg
        self.blocked: set[str] = set()

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
        infos = await super().resolve(host, port, family)
        if not all(self.cfg.address_allowed(i["host"]) for i in infos):
            self.blocked.add(host)
            raise BlockedAddress(f"{host} resolves to a non-public address")
        return infos


@dataclass
class Fetched:
    final_url: str
    status: int | None = None
    body: bytes | None = None
    reason: str | None = None  # set when the fetch failed
    content_type: str | None = None  # the server's Content-Type, which may name the charset
    retry_after: float | None = None  # seconds the server asked to wait (Retry-After), on a 429 or 503


def _ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


async def _fetch_hops(session: aiohttp.ClientSession, resolver: GuardedResolver, url: str, cfg: ScrapeConfig,
                      html_only: bool) -> Fetched:
    visited = {url}
    current = url
    for _ in range(cfg.max_redirects + 1):
        try:
            target = URL(current)  # parsed once: the host checked below is the host aiohttp connects to
        except (ValueError, UnicodeError):
            return Fetched(current, reason="bad_url")
        if target.scheme not in ("http", "https"):
            return Fetched(current, reason="bad_scheme")
        host = target.raw_host or ""
        # aiohttp skips the resolver for IP literals, so they are checked here, in their normalised form.
        if _ip_literal(host) and not cfg.address_allowed(host):
            return Fetched(current, reason="blocked_address")
        try:
            async with session.get(target, allow_redirects=False) as resp:
                if resp.status in REDIRECT_CODES:
                    location = resp.headers.get("Location")
                    if not location:
                        return Fetched(current, resp.status, reason="redirect_without_location")
                    try:
                        current = urljoin(current, location)
                    except ValueError:  # `http://[::1`: not a URL
                        return Fetched(current, resp.status, reason="bad_redirect")
                    if current in visited:
                        return Fetched(current, resp.status, reason="redirect_loop")
                    visited.add(current)
                    continue
                if resp.status != 200:
                    return Fetched(current, resp.status, reason=f"status={resp.status}",
                                   retry_after=retry_after(resp.headers.get("Retry-After")))
                mime = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
                if html_only and mime not in HTML_TYPES:
                    return Fetched(current, resp.status, reason=f"content_type={mime or 'missing'}")
                if (resp.content_length or 0) > cfg.max_bytes:
                    return Fetched(current, resp.status, reason="too_large")
                body = bytearray()
                async for chunk in resp.content.iter_chunked(1 << 16):
                    body += chunk
                    if len(body) > cfg.max_bytes:
                        return Fetched(current, resp.status, reason="too_large")
                return Fetched(current, resp.status, bytes(body), content_type=resp.headers.get("Content-Type"))
        except aiohttp.ClientConnectorError:
            blocked = host in resolver.blocked
            return Fetched(current, reason="blocked_address" if blocked else "connection_error")
        except (aiohttp.ClientPayloadError, aiohttp.ClientResponseError, aiohttp.ServerDisconnectedError):
            return Fetched(current, reason="broken_response")
        except aiohttp.ClientError:
            return Fetched(current, reason="connection_error")
        except (ValueError, LookupError, UnicodeError, aiohttp.http_exceptions.HttpProcessingError):
            # Whatever else a response can hold that the client does not take (a header it cannot decode...):
            # this URL's reject, not the shard's end.
            return Fetched(current, reason="broken_response")
    return Fetched(current, reason="too_many_redirects")


async def http_get(session: aiohttp.ClientSession, resolver: GuardedResolver, url: str, cfg: ScrapeConfig,
                  html_only: bool = True) -> Fetched:
    """Fetch one URL within `cfg.timeout_s` of wall-clock time, whatever the server does."""
    try:
        async with asyncio.timeout(cfg.timeout_s):
            return await _fetch_hops(session, resolver, url, cfg, html_only)
    except TimeoutError:
        return Fetched(url, reason="timeout")


# Failures a later try may not meet: the fetch is tried again (ScrapeConfig.retries).
TRANSIENT = ("timeout", "connection_error", "broken_response", "status=429", "status=502", "status=503", "status=504")


def retry_after(value: str | None) -> float | None:
    """The seconds a Retry-After header asks for (ASCII digits, or an HTTP date), or None for anything else
    (`²` and `٣` are digits to str.isdigit, not to HTTP)."""
    value = (value or "").strip()
    if not value:
        return None
    if value.isascii() and value.isdigit():
        return float(value[:12])  # longer is no wait anyone means: the fetch deadline caps it anyway
    try:
        return max(0.0, (parsedate_to_datetime(value) - datetime.now(timezone.utc)).total_seconds())
    except (TypeError, ValueError, OverflowError, IndexError):
        return None


class Hosts:
    """What the fetches of one shard share per host: a limit on how many run at once, and robots.txt."""

    def __init__(self, session: aiohttp.ClientSession, resolver: GuardedResolver, cfg: ScrapeConfig):
        self.session, self.resolver, self.cfg = session, resolver, cfg
        self.slots: dict[str, asyncio.Semaphore] = {}
        self.robots: dict[str, asyncio.Task] = {}

    def slot(self, url: str) -> asyncio.Semaphore:
        host = urlsplit(url).hostname or ""
        if host not in self.slots:
            self.slots[host] = asyncio.Semaphore(self.cfg.per_host_concurrency)
        return self.slots[host]

    async def allowed(self, url: str) -> bool:
        """Whether the host's robots.txt (fetched once per shard) lets user_agent fetch `url`."""
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in self.robots:
            self.robots[origin] = asyncio.ensure_future(self._rules(origin))
        rules = await self.robots[origin]
        return rules is None or rules.can_fetch(url)

    async def _rules(self, origin: str) -> RobotRules | None:
        async with self.slot(origin):
            got = await http_get(self.session, self.resolver, origin + "/robots.txt", self.cfg, html_only=False)
        if got.reason is not None or got.body is None:
            return None
        # Compiled in a thread, once per host: a robots.txt of many rules does not hold up the other fetches.
        text = got.body.decode("utf-8", "replace")
        return await asyncio.get_running_loop().run_in_executor(None, RobotRules, text, self.cfg.user_agent)

    async def fetch_retrying(self, url: str) -> tuple[Fetched, int]:
        """`url` fetched (no more than per_host_concurrency of its host at once), tried again after a
        TRANSIENT failure up to `retries` times: after retry_wait_s doubled each time plus up to half again at
        random (seeded by the URL, so the same on every run), or what Retry-After asks, at most timeout_s.
        Returns the last try and how many tries it took."""
        rng = random.Random(url)
        for attempt in range(self.cfg.retries + 1):
            async with self.slot(url):
                got = await http_get(self.session, self.resolver, url, self.cfg)
            if got.reason not in TRANSIENT or attempt == self.cfg.retries:
                return got, attempt + 1
            wait = got.retry_after
            if wait is None:
                wait = self.cfg.retry_wait_s * 2**attempt * (1 + rng.random() / 2)
            await asyncio.sleep(min(wait, self.cfg.timeout_s))
        raise AssertionError("unreachable")


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
    connector = aiohttp.TCPConnector(limit=cfg.concurrency, resolver=resolver, force_close=True)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=cfg.timeout_s, sock_read=cfg.timeout_s)

    async with aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        headers={"User-Agent": cfg.user_agent},
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
    ) as session:

        hosts = Hosts(session, resolver, cfg)

        async def worker() -> None:
            for position, url_row in queue:
                started = time.perf_counter()
                tries = 0
                if cfg.robots_txt and not await hosts.allowed(url_row["url"]):
                    got = Fetched(url_row["url"], reason="robots_disallowed")
                else:
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
                }
                reason, charset = got.reason, None
                if reason is None and looks_binary(got.body):
                    reason = "binary_content"
                if reason is None:
                    fields, reason, charset = await asyncio.get_running_loop().run_in_executor(
                        None, extracted, pool, got.final_url, got.body, got.content_type, cfg.extractor)
                    row.update(fields)
                row.update(elapsed_s=round(time.perf_counter() - started, 4), fetched_at=_now())
                raw = got.body.decode("latin-1") if cfg.keep_html and got.body is not None else None
                chunks.add(position, {"row": row, "reason": reason, "html": raw, "charset": charset,
                                      "content_type": got.content_type, "tries": tries})
                fetched.update(1)

        await asyncio.gather(*(worker() for _ in range(cfg.concurrency)))


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
    queue = ((n, row) for n, row in enumerate(read_rows(url_shard, columns=["id", "url"], kind="URL"))
             if chunks.pending(n))
    try:
        with progress(total=total, initial=resumed, desc=f"scrape {url_shard.stem}", unit="url") as fetched:
            if resumed < total:
                with extraction_pool(cfg) as pool:
                    asyncio.run(_scrape_pending(queue, cfg, pool, chunks, fetched))
    finally:
        chunks.close()

    html_writer = ShardWriter(sidecar_path(output, "html"), HTML_SCHEMA) if cfg.keep_html else None
    try:
        with ShardOutput("scrape", output, DOC_SCHEMA, [url_shard], cfg.params()) as stage:
            charsets: Counter[str] = Counter()
            retried = 0
            for entry in chunks.entries():
                retried += max(entry.get("tries", 1) - 1, 0)
                if entry["reason"]:
                    stage.reject(entry["row"], entry["reason"])
                else:
                    stage.keep(entry["row"])
                if entry.get("charset"):
                    charsets[entry["charset"]] += 1
                if html_writer and entry["html"] is not None:
                    html_writer.write({"id": entry["row"]["id"], "final_url": entry["row"]["final_url"],
                                       "html": entry["html"].encode("latin-1"), "content_type": entry.get("content_type")})
            if html_writer:
                html_writer.close()  # before the manifest: a finished shard has its HTML
            return stage.finish(total, resumed=resumed, charsets=dict(sorted(charsets.items())), retries=retried)
    except BaseException:
        if html_writer:
            html_writer.abort()
        raise


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
        charsets: Counter[str] = Counter()
        count = 0
        for row, reason, charset in ordered_map(threads, again, chain(with_pages(kept), with_pages(rejected)),
                                                4 * workers):
            count += 1
            if charset:
                charsets[charset] += 1
            if reason:
                stage.reject(row, reason)
            else:
                stage.keep(row)
        return stage.finish(count, charsets=dict(sorted(charsets.items())))


def ordered_map(executor: ThreadPoolExecutor, function: Callable, items: Iterable, window: int) -> Iterator:
    """`executor.map` with at most `window` items taken at a time (Executor.map takes them all at once)."""
    pending: deque = deque()
    for item in items:
        pending.append(executor.submit(function, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()
