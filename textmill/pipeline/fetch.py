"""Fetching one URL, after OpenWebText's download.py, and what the fetches of a shard share per host.

A hard wall-clock deadline per URL (DNS, connect, redirects and the whole body included, not just a socket
timeout), a size cap counted on the decompressed body, bounded redirects followed by hand so every hop is
checked, and http/https only. Private, loopback and link-local addresses are refused unless
`allow_private_addresses` is set (tests and the demo serve from 127.0.0.1) or the address is in one of
`allow_networks` (a local mirror, say). The address checked is the one connected to: each hop's URL is parsed
once by yarl, the parser aiohttp itself uses, whose IDNA step turns full-width or circled digits and
ideographic full stops into ASCII (`１２７。０.０.①` is 127.0.0.1); an IP literal is checked on that form, and
every other host by the resolver aiohttp connects through. Whatever a response holds, the URL gets a reason:
nothing a server sends raises out of `http_get`.

A fetch that failed in a way that may pass (TRANSIENT: a connection error, 429, 502, 503, 504) is tried again
up to `retries` times, after an exponential wait with seeded jitter or what Retry-After asks; a timeout is
not (a URL that never answers holds its slot for one `read_timeout_s`, not three `timeout_s`). A host that
does not accept a connection within `connect_timeout_s`, refuses or cannot be reached is down for that URL;
after `host_give_up` of its URLs in a row found it down, its other URLs are rejected unfetched (`host_down`).
No more than `per_host_concurrency` URLs of one host are fetched at once; with `robots_txt`, a page its host's
robots.txt disallows is rejected unfetched.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import socket
from collections import Counter, deque
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Iterator
from urllib.parse import urljoin, urlsplit

import aiohttp
from yarl import URL

from textmill.io.numbers import whole_number
from textmill.pipeline.robots import RobotRules
from textmill.pipeline.stage_configs import ScrapeConfig

HTML_TYPES = ("text/html", "application/xhtml+xml")
REDIRECT_CODES = (301, 302, 303, 307, 308)


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
    host_down: bool = False  # the host refused, could not be reached, or did not accept within connect_timeout_s


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
                body = await body_at_most(resp, cfg.max_bytes)
                if body is None:
                    return Fetched(current, resp.status, reason="too_large")
                return Fetched(current, resp.status, body, content_type=resp.headers.get("Content-Type"))
        except aiohttp.ClientConnectorError:  # refused, unreachable, no such name
            blocked = host in resolver.blocked
            return Fetched(current, reason="blocked_address" if blocked else "connection_error", host_down=not blocked)
        except aiohttp.ConnectionTimeoutError:
            return Fetched(current, reason="timeout", host_down=True)
        except aiohttp.ServerTimeoutError:  # connected, then nothing for timeout_s
            return Fetched(current, reason="timeout")
        except (aiohttp.ClientPayloadError, aiohttp.ClientResponseError, aiohttp.ServerDisconnectedError):
            return Fetched(current, reason="broken_response")
        except aiohttp.ClientError:
            return Fetched(current, reason="connection_error")
        except (ValueError, LookupError, UnicodeError, aiohttp.http_exceptions.HttpProcessingError):
            # Whatever else a response can hold that the client does not take (a header it cannot decode...):
            # this URL's reject, not the shard's end.
            return Fetched(current, reason="broken_response")
    return Fetched(current, reason="too_many_redirects")


async def body_at_most(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """A response's body, or None as soon as it passes `limit` bytes (the rest is never read)."""
    body = bytearray()
    async for chunk in response.content.iter_chunked(1 << 16):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


async def http_get(session: aiohttp.ClientSession, resolver: GuardedResolver, url: str, cfg: ScrapeConfig,
                  html_only: bool = True) -> Fetched:
    """Fetch one URL within `cfg.timeout_s` of wall-clock time, whatever the server does."""
    try:
        async with asyncio.timeout(cfg.timeout_s):
            return await _fetch_hops(session, resolver, url, cfg, html_only)
    except TimeoutError:
        return Fetched(url, reason="timeout")


# Failures a later try may not meet: the fetch is tried again (ScrapeConfig.retries). Not a timeout: trying again
# would hold the slot as long again, and a URL that never answers held one for three deadlines and the waits.
TRANSIENT = ("connection_error", "broken_response", "status=429", "status=502", "status=503", "status=504")


def retry_after(value: str | None) -> float | None:
    """The seconds a Retry-After header asks for (ASCII digits, or an HTTP date), or None for anything else
    (`²` and `٣` are digits to str.isdigit, not to HTTP)."""
    value = value or ""
    seconds = whole_number(value)  # None past 18 digits, no wait anyone means (nor a date either)
    if seconds is not None:
        return float(seconds)
    try:
        return max(0.0, (parsedate_to_datetime(value) - datetime.now(timezone.utc)).total_seconds())
    except (TypeError, ValueError, OverflowError, IndexError):
        return None


def backoff_wait(cfg: ScrapeConfig, attempt: int, rng: random.Random, asked: float | None) -> float:
    """Seconds to wait before try `attempt + 2`: what the server asked (Retry-After), else retry_wait_s doubled
    each time plus up to half again at random; at most timeout_s."""
    wait = asked if asked is not None else cfg.retry_wait_s * 2**attempt * (1 + rng.random() / 2)
    return min(wait, cfg.timeout_s)


class Hosts:
    """What the fetches of one shard share per host: a limit on how many run at once, robots.txt, and how many of
    its URLs in a row found it down."""

    def __init__(self, session: aiohttp.ClientSession, resolver: GuardedResolver, cfg: ScrapeConfig):
        self.session, self.resolver, self.cfg = session, resolver, cfg
        self.slots: dict[str, asyncio.Semaphore] = {}
        self.robots: dict[str, asyncio.Task] = {}
        self.down: Counter[str] = Counter()  # host:port -> its URLs in a row that found it down
        self.freed = asyncio.Event()  # set when a fetch gives its host's slot back

    def busy(self, url: str) -> bool:
        """Whether every slot of the URL's host is in use."""
        return self.slot(url).locked()

    async def slot_freed(self) -> None:
        """Until some fetch gives its host's slot back."""
        self.freed.clear()
        await self.freed.wait()

    def given_up(self, host: str) -> bool:
        return 0 < self.cfg.host_give_up <= self.down[host]

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
        try:
            async with self.slot(origin):
                got = await http_get(self.session, self.resolver, origin + "/robots.txt", self.cfg, html_only=False)
        finally:
            self.freed.set()
        if got.reason is not None or got.body is None:
            # RFC 9309 2.3.1: a robots.txt the site says it lacks (4xx) allows everything; one it fails to give (5xx,
            # no connection, no answer in time) disallows everything, until a later shard asks again.
            unreachable = got.reason in ("timeout", "connection_error", "broken_response") or (
                got.reason or "").startswith("status=5")
            return RobotRules("User-agent: *\nDisallow: /\n", self.cfg.user_agent) if unreachable else None
        # Compiled in a thread, once per host: a robots.txt of many rules does not hold up the other fetches.
        text = got.body.decode("utf-8", "replace")
        return await asyncio.get_running_loop().run_in_executor(None, RobotRules, text, self.cfg.user_agent)

    async def fetch_retrying(self, url: str) -> tuple[Fetched, int]:
        """`url` fetched (no more than per_host_concurrency of its host at once), tried again after a
        TRANSIENT failure up to `retries` times: after retry_wait_s doubled each time plus up to half again at
        random (seeded by the URL, so the same on every run), or what Retry-After asks, at most timeout_s.
        A host that host_give_up URLs in a row found down is not tried again: the URL is rejected as host_down.
        Returns the last try and how many tries it took."""
        rng = random.Random(url)
        host = urlsplit(url).netloc
        for attempt in range(self.cfg.retries + 1):
            try:
                async with self.slot(url):
                    if self.given_up(host):
                        return Fetched(url, reason="host_down"), attempt
                    got = await http_get(self.session, self.resolver, url, self.cfg)
            finally:  # however the slot was given back (an error included): a URL set aside may go now
                self.freed.set()
            if got.reason not in TRANSIENT or attempt == self.cfg.retries:
                self.down[host] = self.down[host] + 1 if got.host_down else 0
                return got, attempt + 1
            await asyncio.sleep(backoff_wait(self.cfg, attempt, rng, got.retry_after))
        raise AssertionError("unreachable")


class HostQueue:
    """The URLs of a shard, (position, row), handed to the fetch workers in input order but for one thing: a URL
    whose host has every slot in use is set aside (at most `aside` of them) and handed out, oldest first, once
    its host has a free slot. A worker then fetches from another host instead of waiting on a busy one (with
    `per_host_concurrency` 4 and a list where one host holds a seventh of the URLs, workers stood waiting on it)."""

    def __init__(self, rows: Iterator[tuple[int, dict]], hosts: Hosts, aside: int):
        self.rows, self.hosts, self.aside = rows, hosts, aside
        self.waiting: deque[tuple[int, dict]] = deque()
        self.read_all = False

    async def next(self) -> tuple[int, dict] | None:
        """The next URL to fetch, or None when every URL has been handed out."""
        while True:
            for item in self.waiting:
                if not self.hosts.busy(item[1]["url"]):
                    self.waiting.remove(item)
                    return item
            if not self.read_all and len(self.waiting) < self.aside:
                item = next(self.rows, None)
                if item is None:
                    self.read_all = True
                elif not self.hosts.busy(item[1]["url"]):
                    return item
                else:
                    self.waiting.append(item)
                continue
            if self.read_all and not self.waiting:
                return None
            await self.hosts.slot_freed()
