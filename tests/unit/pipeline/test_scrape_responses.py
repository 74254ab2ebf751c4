"""No response ends a shard: a server on 127.0.0.1 that writes whatever bytes it is given (generated status lines,
headers and bodies, and the cases that once ended a scrape) gets each URL a reject with a listed reason or a
kept page, never an exception out of the fetch."""

import asyncio
import dataclasses
import socket
import threading
from contextlib import contextmanager

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from textmill.pipeline.reasons import is_listed
from textmill.pipeline.scrape import GuardedResolver, ScrapeConfig, http_get, retry_after, scrape_shard
from unit.pipeline.test_scrape import url_shard_of

CFG = ScrapeConfig(timeout_s=3.0, allow_private_addresses=True, max_bytes=100_000, extract_workers=0, retries=0,
                   max_redirects=2)
PAGE = b"<html><head><title>T</title></head><body><p>" + b"A paragraph of ordinary words. " * 30 + b"</p></body></html>"


@contextmanager
def raw_server(answer):
    """A TCP server on 127.0.0.1 that reads a request's head and writes `answer(path)` (bytes) back, then
    closes; yields its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            head = b""
            try:
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    got = conn.recv(4096)
                    if not got:
                        return
                    head += got
                path = head.split(b" ", 2)[1].decode("latin-1") if head.count(b" ") >= 2 else "/"
                conn.sendall(answer(path))
            except OSError:
                pass  # the client gave up first, as it may

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()


def fetch_once(url: str):
    async def go():
        resolver = GuardedResolver(CFG)
        connector = aiohttp.TCPConnector(resolver=resolver, force_close=True)
        async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as session:
            return await http_get(session, resolver, url, CFG)

    return asyncio.run(go())


HEADER_NAMES = st.sampled_from(["Location", "Retry-After", "Content-Type", "Content-Length", "Transfer-Encoding",
                                "Content-Encoding", "Set-Cookie", "Connection", "X-Anything"])
HEADER_VALUES = st.one_of(st.text(max_size=40), st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
                          st.sampled_from(["²", "٣", "9" * 5000, "http://[::1", "//[", "gzip", "chunked", "-1",
                                           "text/html; charset=not-a-charset", "999999999999999999999"]))


@st.composite
def responses(draw) -> bytes:
    status = draw(st.one_of(st.sampled_from([200, 301, 302, 303, 307, 308, 404, 429, 500, 503]), st.integers(0, 1200)))
    reason = draw(st.sampled_from([b"OK", b"", b"\xff\xfe", b"Moved"]))
    line = draw(st.sampled_from([b"HTTP/1.1 %d %s", b"HTTP/1.0 %d %s", b"HTTP/9 %d %s", b"%d %s", b"HTTP/1.1 %d%s"]))
    head = [line % (status, reason)]
    for _ in range(draw(st.integers(0, 5))):
        head.append(draw(HEADER_NAMES).encode() + b": " + draw(HEADER_VALUES).encode("utf-8", "surrogatepass"))
    body = draw(st.one_of(st.just(PAGE), st.binary(max_size=300)))
    return b"\r\n".join(head) + b"\r\n\r\n" + body


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses())
def test_any_response_is_a_kept_page_or_a_listed_reason(response):
    with raw_server(lambda path: response) as base:
        got = fetch_once(base + "/page")
    assert got.reason is None or is_listed("scrape", got.reason.partition("=")[0]), got.reason
    assert got.reason is not None or got.body is not None


@given(st.text(max_size=60))
def test_retry_after_is_seconds_or_nothing(value):
    seconds = retry_after(value)
    assert seconds is None or seconds >= 0.0


def test_the_responses_that_once_ended_a_shard_are_each_a_reject(tmp_path):
    """A 503 with Retry-After `²`, a 302 to `http://[::1`, headers that are not text: the shard is written with
    every URL in it, the page beside them kept."""
    answers = {
        "/retry-superscript": b"HTTP/1.1 503 Busy\r\nRetry-After: \xc2\xb2\r\nContent-Length: 0\r\n\r\n",
        "/retry-arabic": b"HTTP/1.1 429 Slow\r\nRetry-After: \xd9\xa3\r\nContent-Length: 0\r\n\r\n",
        "/retry-huge": b"HTTP/1.1 503 Busy\r\nRetry-After: " + b"9" * 5000 + b"\r\nContent-Length: 0\r\n\r\n",
        "/bad-ipv6": b"HTTP/1.1 302 Found\r\nLocation: http://[::1\r\nContent-Length: 0\r\n\r\n",
        "/bytes-header": b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-\xff: \xfe\x00\r\n\r\n" + PAGE,
        "/bad-length": b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: -5\r\n\r\n" + PAGE,
        "/page": b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(PAGE), PAGE),
    }
    with raw_server(lambda path: answers.get(path, answers["/page"])) as base:
        shard = url_shard_of(tmp_path / "urls.parquet", [base + path for path in answers])
        manifest = scrape_shard(shard, tmp_path / "out" / "urls.parquet", dataclasses.replace(CFG, retries=1, retry_wait_s=0.05))
    counts = manifest["counts"]
    assert counts["input"] == len(answers) == counts["kept"] + counts["rejected"]
    assert counts["kept"] >= 1 and all(is_listed("scrape", r.partition("=")[0]) for r in manifest["reasons"])
    assert manifest["reasons"].get("bad_redirect") == 1
