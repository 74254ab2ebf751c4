"""No response ends a shard, and no URL holds a slot long (textmill.pipeline.fetch): a server on 127.0.0.1 that writes
whatever bytes it is given (generated status lines, headers and bodies, and the cases that once ended a scrape) gets
each URL a reject with a listed reason or a kept page, never an exception out of the fetch."""

import asyncio
import dataclasses
import socket
import threading
from contextlib import contextmanager

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from textmill.pipeline.reasons import is_listed
from textmill.pipeline.fetch import GuardedResolver, http_get, retry_after
from textmill.pipeline.scrape import ScrapeConfig, scrape_shard
from unit.pipeline.test_scrape import url_shard_of

CFG = ScrapeConfig(timeout_s=3.0, allow_private_addresses=True, max_bytes=100_000, extract_workers=0, retries=0,
                   max_redirects=2)
PAGE = b"<html><head><title>T</title></head><body><p>" + b"A paragraph of ordinary words. " * 30 + b"</p></body></html>"


@contextmanager
def raw_server(answer, host: str = "127.0.0.1"):
    """A TCP server on `host` that reads a request's head and writes `answer(path)` (bytes) back, then closes;
    yields its base URL."""
    listener = socket.create_server((host, 0))
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
        yield f"http://{host}:{listener.getsockname()[1]}"
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


def test_a_url_that_never_answers_holds_its_slot_once_and_a_down_host_is_given_up(tmp_path):
    """A server that accepts and never answers costs one timeout_s (no retry at full length); a host that refuses
    connections is given up after host_give_up URLs in a row, its other URLs rejected unfetched as host_down."""
    import pyarrow.parquet as pq

    from textmill.pipeline.shards import rejects_path

    silent = socket.create_server(("127.0.0.1", 0), backlog=64)  # accepts (the kernel's backlog), never answers
    closed = socket.create_server(("127.0.0.1", 0))
    refused_port = closed.getsockname()[1]
    closed.close()  # nothing listens there: connections are refused
    try:
        urls = [f"http://127.0.0.1:{silent.getsockname()[1]}/never"] + [
            f"http://127.0.0.1:{refused_port}/page-{n}" for n in range(6)]
        shard = url_shard_of(tmp_path / "urls.parquet", urls)
        cfg = dataclasses.replace(CFG, timeout_s=1.0, retries=2, retry_wait_s=0.01, concurrency=1,
                                  per_host_concurrency=1, host_give_up=3)
        manifest = scrape_shard(shard, tmp_path / "out" / "urls.parquet", cfg)
    finally:
        silent.close()
    rows = {r["url"].rsplit("/", 1)[1]: r for r in pq.read_table(rejects_path(tmp_path / "out" / "urls.parquet")).to_pylist()}
    assert rows["never"]["reason"] == "timeout" and rows["never"]["elapsed_s"] < 1.9  # one try of 1 s, not three
    assert [rows[f"page-{n}"]["reason"] for n in range(6)] == ["connection_error"] * 3 + ["host_down"] * 3
    assert manifest["counts"]["rejected"] == 7


def test_a_setting_added_to_the_scrape_keys_its_folder_only_when_set():
    """connect_timeout_s, read_timeout_s and host_give_up came after scrape folders were keyed: at their defaults
    the key is the one existing work folders have; set, it is in the key."""
    from textmill.settings import key_params

    assert not {"connect_timeout_s", "read_timeout_s", "host_give_up"} & set(key_params(ScrapeConfig()))
    assert key_params(ScrapeConfig(host_give_up=0))["host_give_up"] == 0


def test_urls_of_a_busy_host_wait_aside_while_other_hosts_are_fetched(tmp_path):
    """Five slow URLs of one host (one slot a host) come first in the list, five of another after: the other
    host's URLs are fetched while the first host's wait for its one slot, not after them."""
    import time

    order = []

    def answer(path: str) -> bytes:
        if path.startswith("/slow"):
            time.sleep(0.4)
        order.append(path)
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(PAGE), PAGE)

    with raw_server(answer) as slow_base, raw_server(answer, "127.0.0.2") as fast_base:
        urls = [f"{slow_base}/slow-{n}" for n in range(5)] + [f"{fast_base}/fast-{n}" for n in range(5)]
        shard = url_shard_of(tmp_path / "urls.parquet", urls)
        cfg = dataclasses.replace(CFG, concurrency=2, per_host_concurrency=1)
        manifest = scrape_shard(shard, tmp_path / "out" / "urls.parquet", cfg)
    assert manifest["counts"]["kept"] == 10
    assert order.index("/fast-4") < order.index("/slow-1"), order  # not behind the slow host's queue


def test_urls_set_aside_for_a_host_given_up_are_all_answered(tmp_path):
    """One URL of a host that answers, then many of a host that refuses connections, more than the workers can hold:
    the URLs set aside for the refusing host are handed out as it is given up (host_down), the last of them too,
    and the scrape ends with every URL counted."""
    closed = socket.create_server(("127.0.0.1", 0))
    refused_port = closed.getsockname()[1]
    closed.close()
    with raw_server(lambda path: b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(PAGE), PAGE), "127.0.0.2") as other:
        urls = [other + "/page"] + [f"http://127.0.0.1:{refused_port}/page-{n}" for n in range(40)]
        shard = url_shard_of(tmp_path / "urls.parquet", urls)
        cfg = dataclasses.replace(CFG, concurrency=4, per_host_concurrency=1, retries=0, host_give_up=2)
        manifest = scrape_shard(shard, tmp_path / "out" / "urls.parquet", cfg)
    assert manifest["counts"]["kept"] == 1 and manifest["reasons"] == {"connection_error": 2, "host_down": 38}
