"""The scrape stage against a real HTTP server on 127.0.0.1: each fault its reason, the address guard, retries,
decoding, extraction deadlines."""

import dataclasses
import functools
import gzip
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.stages import url_shard
from textmill.demo import synthweb
from textmill.errors import TextmillError
from textmill.pipeline.charset import decode_html
from textmill.pipeline.extract import extract
from textmill.pipeline.scrape import ScrapeConfig, scrape_shard
from textmill.pipeline.scrape_chunks import chunk_path, settings_tag

FAST = ScrapeConfig(timeout_s=2.0, allow_private_addresses=True, max_bytes=1_000_000, concurrency=8, extract_workers=0,
                    retries=0, per_host_concurrency=8)


def test_every_fault_gets_its_reason(tmp_path, small_web, server):
    base = synthweb.base_url(server)
    paths = ["/article/1.html", "/redirect/0.html", "/missing.html", "/error.html", "/hang.html", "/drip.html",
             "/huge.html", "/loop/a.html", "/binary.html", "/report.pdf.html", "/empty.html", "/fr/0.html"]
    shard = url_shard(tmp_path, [base + p for p in paths] + ["http://127.0.0.1:9/closed.html"])
    started = time.perf_counter()
    m = scrape_shard(shard, tmp_path / "sc" / "urls.parquet", FAST)
    elapsed = time.perf_counter() - started
    rejects = {r["url"].removeprefix(base): r for r in pq.read_table(tmp_path / "sc" / ".rejects" / "urls.parquet").to_pylist()}
    reasons = {p: r["reason"] for p, r in rejects.items()}
    assert reasons == {
        "/missing.html": "status=404",
        "/error.html": "status=500",
        "/hang.html": "timeout",
        "/drip.html": "timeout",
        "/huge.html": "too_large",
        "/loop/a.html": "redirect_loop",
        "/binary.html": "binary_content",
        "/report.pdf.html": "content_type=application/pdf",
        "/empty.html": "empty_extraction",
        "http://127.0.0.1:9/closed.html": "connection_error",
    }
    # the deadline is a hard wall-clock limit: a dripping body does not keep the fetch alive
    assert rejects["/drip.html"]["elapsed_s"] < FAST.timeout_s + 1.0
    assert elapsed < 3 * FAST.timeout_s
    kept = {r["url"].removeprefix(base): r for r in pq.read_table(tmp_path / "sc" / "urls.parquet").to_pylist()}
    assert set(kept) == {"/article/1.html", "/redirect/0.html", "/fr/0.html"}
    article = kept["/article/1.html"]
    assert article["status"] == 200 and article["domain"] == "127.0.0.1" and article["word_count"] > 50
    assert article["text"].split("\n\n")[1] in small_web.texts["/article/1.html"]
    assert kept["/redirect/0.html"]["final_url"] == base + "/article/0.html"
    assert m["counts"]["kept"] + m["counts"]["rejected"] == m["counts"]["input"] == len(paths) + 1


def test_private_addresses_refused_by_default(tmp_path, server):
    port = server.server_address[1]
    shard = url_shard(tmp_path, [f"http://127.0.0.1:{port}/article/1.html", f"http://localhost.localdomain:{port}/article/2.html"])
    cfg = ScrapeConfig(timeout_s=5.0, extract_workers=0)
    scrape_shard(shard, tmp_path / "sc" / "urls.parquet", cfg)
    reasons = pq.read_table(tmp_path / "sc" / ".rejects" / "urls.parquet").column("reason").to_pylist()
    assert reasons[0] == "blocked_address"
    assert reasons[1] in ("blocked_address", "connection_error")  # the name may not resolve at all here
    assert server.hits.get("/article/1.html") is None


def test_keep_html_sidecar_allows_reextraction(tmp_path, server):
    base = synthweb.base_url(server)
    shard = url_shard(tmp_path, [base + "/article/3.html", base + "/missing.html"])
    cfg = ScrapeConfig(timeout_s=5.0, allow_private_addresses=True, keep_html=True, extract_workers=1)
    scrape_shard(shard, tmp_path / "sc" / "urls.parquet", cfg)
    [html_row] = pq.read_table(tmp_path / "sc" / ".html" / "urls.parquet").to_pylist()
    [doc] = pq.read_table(tmp_path / "sc" / "urls.parquet").to_pylist()
    html, how = decode_html(html_row["html"], html_row["content_type"])
    assert how == "header:utf-8" and extract(html_row["final_url"], html, cfg.extractor) == (doc["title"], doc["text"])


def test_an_archived_scrape_extracts_again_from_its_archive_to_the_same_documents(tmp_path, small_web, server):
    """keep_warc: every page fetched is a request and a response record of .warc/NAME.warc.gz, which the WARC stage
    reads back into the documents the scrape kept (a redirect's document under its final URL) and its rejects
    after the fetch (an empty page, binary content), fetching nothing."""
    from textmill.pipeline.units import warc_units
    from textmill.pipeline.warc import warc_shard

    base = synthweb.base_url(server)
    paths = ["/article/3.html", "/redirect/0.html", "/missing.html", "/empty.html", "/binary.html", "/mojibake/0.html"]
    shard = url_shard(tmp_path, [base + p for p in paths])
    output = tmp_path / "sc" / "urls.parquet"
    scrape_shard(shard, output, dataclasses.replace(FAST, keep_warc=True))
    scraped = {row["final_url"]: row for row in pq.read_table(output).to_pylist()}
    [unit] = warc_units(tmp_path / "sc" / ".warc" / "urls.warc.gz", 100)
    assert unit.records == 2 * 5  # every page with a body: not /missing.html
    archived = warc_shard(unit, tmp_path / "again" / "urls.parquet", FAST)
    again = {row["url"]: row for row in pq.read_table(tmp_path / "again" / "urls.parquet").to_pylist()}
    assert set(again) == set(scraped) and archived["reasons"] == {"binary_content": 1, "empty_extraction": 1}
    for url, row in again.items():
        assert (row["title"], row["text"], row["fetched_at"]) == \
            (scraped[url]["title"], scraped[url]["text"], scraped[url]["fetched_at"])
    # Issue 65: the archive carries the block and payload digests crawlers write, and warcio's check verifies them.
    check = subprocess.run([sys.executable, "-c", "from warcio.cli import main; main()", "check", "-v",
                            str(tmp_path / "sc" / ".warc" / "urls.warc.gz")], capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count("digest pass") == 2 * 5, check.stdout[-2000:]


# Hosts that aiohttp's URL parser (yarl, IDNA) normalises to 127.0.0.1: full-width digits, ideographic full
# stops, circled digits, and one full-width digit in an otherwise ASCII address.
LOOPBACK_DISGUISES = ["１２７.０.０.１", "127。0。0。1", "①②⑦.⓪.⓪.①", "127.0.0.１"]


def url_shard_of(path: Path, urls: list[str]) -> Path:
    """A URL shard written directly (as another tool might), without the blacklist's URL checks."""
    from textmill.pipeline.shards import URL_SCHEMA, write_table

    rows = [{"id": f"u{i}", "url": u, "source": f"test:{i}"} for i, u in enumerate(urls)]
    write_table(pa.Table.from_pylist(rows, schema=URL_SCHEMA), path)
    return path


@contextmanager
def serving(handler, host: str):
    """An HTTP server with `handler` on `host`, a free port, in a background thread; yields its base URL."""
    srv = ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@functools.cache
def gzip_bomb() -> bytes:
    return gzip.compress(bytes(200 << 20), compresslevel=9)  # 200 MB of zeros in about 200 KB


@contextmanager
def hostile_server(host: str):
    """A server on `host`: /to?URL answers a 302 to URL (its raw UTF-8 bytes, as a hostile server sends
    them), /chain/N a 302 to /chain/N+1 (endless), /bomb a gzip bomb, anything else a small article."""
    hits = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            if self.path.startswith(("/to?", "/chain/")):
                target = (unquote(self.path[4:]) if self.path.startswith("/to?")
                          else f"/chain/{int(self.path.rsplit('/', 1)[1]) + 1}")
                self.send_response(302)
                self.send_header("Location", target.encode("utf-8").decode("latin-1"))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            bomb = self.path == "/bomb"
            body = gzip_bomb() if bomb else (
                f"<html><head><title>Mirror</title></head><body><p>{'A mirrored paragraph of text. ' * 40}</p>"
                "</body></html>").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            if bomb:
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass  # the client stopped reading, as it should

        def log_message(self, *args):
            pass

    with serving(Handler, host) as base:
        yield base, hits


def test_disguised_loopback_hosts_are_blocked_on_the_first_hop(tmp_path, server):
    port = server.server_address[1]
    shard = url_shard_of(tmp_path / "urls.parquet", [f"http://{h}:{port}/article/1.html" for h in LOOPBACK_DISGUISES])
    m = scrape_shard(shard, tmp_path / "sc" / "urls.parquet", ScrapeConfig(timeout_s=5.0, extract_workers=0))
    assert m["reasons"] == {"blocked_address": len(LOOPBACK_DISGUISES)}
    assert server.hits == {}


def test_disguised_loopback_hosts_are_blocked_after_a_redirect(tmp_path, server):
    """127.0.0.2 is allowed (a mirror); its redirects to the loopback server in disguise are not followed."""
    port = server.server_address[1]
    with hostile_server("127.0.0.2") as (mirror, mirror_hits):
        targets = [f"http://{h}:{port}/article/1.html" for h in LOOPBACK_DISGUISES]
        urls = [f"{mirror}/to?{quote(t, safe='')}" for t in targets] + [f"{mirror}/to?{quote(mirror + '/page', safe='')}"]
        shard = url_shard_of(tmp_path / "urls.parquet", urls)
        cfg = ScrapeConfig(timeout_s=5.0, allow_networks=("127.0.0.2/32",), extract_workers=0)
        m = scrape_shard(shard, tmp_path / "sc" / "urls.parquet", cfg)
    assert m["reasons"] == {"blocked_address": len(LOOPBACK_DISGUISES)}
    assert m["counts"]["kept"] == 1  # the allowed mirror's own page, reached through its redirect
    assert len(mirror_hits) == len(urls) + 1
    assert server.hits == {}


def test_allow_networks_must_be_networks():
    with pytest.raises(TextmillError, match="'localhost' is not an address or network"):
        ScrapeConfig(allow_networks=("localhost",))


def test_a_page_that_stalls_extraction_is_rejected_and_its_worker_goes_on(tmp_path):
    """An extractor needs seconds of CPU for a page of tens of thousands of short paragraphs (time grows faster than
    the page: trafilatura 2.3 took 1.6 s for 32,000 here, 4.2 s for 64,000); with a limit of 1.5 CPU-seconds the
    page of 64,000 is rejected, and the pages after it are still extracted by the one worker."""
    web = synthweb.build_web(seed=4, articles=3, near_duplicates=0, foreign=0, mojibake=0, short=0, faults=False)
    paragraphs = "".join(f"<p>the cat and the dog went to the market {i}.</p>" for i in range(64000))
    web.pages["/stall.html"] = synthweb.Page(body=f"<html><head><title>t</title></head><body>{paragraphs}</body></html>".encode())
    with synthweb.serve(web) as srv:
        base = synthweb.base_url(srv)
        shard = url_shard(tmp_path, [base + "/stall.html"] + [base + p for p in web.url_paths])
        cfg = ScrapeConfig(timeout_s=10.0, extract_timeout_s=1.5, allow_private_addresses=True, concurrency=1, extract_workers=1)
        m = scrape_shard(shard, tmp_path / "sc" / "urls.parquet", cfg)
    assert m["reasons"] == {"extraction_timeout": 1}
    assert m["counts"]["kept"] == len(web.url_paths) == 3


def test_the_extraction_limit_is_cpu_time_so_a_stalled_machine_keeps_the_same_pages():
    """A worker stopped for three times the limit (as a machine busy with other work stalls it) still extracts
    its page: its CPU time, not the wall clock, is what the limit counts. A page over the limit leaves the worker
    in place (no process started again, no imports paid again)."""
    import os
    import signal
    from concurrent.futures import ThreadPoolExecutor

    from textmill.pipeline.extract import ExtractionTimeout, ExtractorPool

    page = "<html><head><title>T</title></head><body>" + "<p>An ordinary paragraph of words.</p>" * 50 + "</body></html>"
    paragraphs = "".join(f"<p>the cat and the dog went to the market {i}.</p>" for i in range(32000))
    slow = "<html><body>" + paragraphs + "</body></html>"
    pool = ExtractorPool(1, timeout_s=1.0)
    try:
        [(process, _)] = pool._all
        assert pool.extract("http://x/warm", page, "trafilatura")[1]  # the worker's imports, before the clock matters
        with ThreadPoolExecutor(1) as thread:
            os.kill(process.pid, signal.SIGSTOP)
            try:
                pending = thread.submit(pool.extract, "http://x/a", page, "trafilatura")
                time.sleep(3.0)
            finally:
                os.kill(process.pid, signal.SIGCONT)
            assert "ordinary paragraph" in pending.result()[1]
        with pytest.raises(ExtractionTimeout, match="CPU time"):
            pool.extract("http://x/slow", slow, "newspaper")
        assert pool._all[0][0] is process and process.is_alive()
        assert "ordinary paragraph" in pool.extract("http://x/b", page, "trafilatura")[1]
    finally:
        pool.close()


def test_a_gzip_bomb_and_an_endless_redirect_chain_are_cut_off(tmp_path):
    with hostile_server("127.0.0.1") as (base, hits):
        shard = url_shard_of(tmp_path / "urls.parquet", [f"{base}/bomb", f"{base}/chain/0"])
        cfg = ScrapeConfig(timeout_s=20.0, max_bytes=1_000_000, max_redirects=5, allow_private_addresses=True, extract_workers=0)
        scrape_shard(shard, tmp_path / "sc" / "urls.parquet", cfg)
    rejects = pq.read_table(tmp_path / "sc" / ".rejects" / "urls.parquet")
    reasons = dict(zip(rejects.column("id").to_pylist(), rejects.column("reason").to_pylist(), strict=True))
    assert reasons == {"u0": "too_large", "u1": "too_many_redirects"}
    assert sum(p.startswith("/chain/") for p in hits) == cfg.max_redirects + 1


def test_an_extraction_failure_keeps_what_failed():
    from textmill.pipeline.extract import failure_text

    assert failure_text(ValueError("no body\n  in this   page")) == "ValueError: no body in this page"
    assert failure_text(KeyError()) == "KeyError"
    assert len(failure_text(RuntimeError("x" * 1000))) == len("RuntimeError: ") + 120


CHARSET_PAGES = {  # codec: (title, a sentence) in that script
    "windows-1251": ("Привет, мир", "Съешь же ещё этих мягких французских булок, да выпей чаю."),
    "shift_jis": ("日本語のページ", "吾輩は猫である。名前はまだ無い。"),
    "gb18030": ("中文网页标题", "这是一个用来检查编码的测试页面。"),
}


def charset_page(title: str, body: str, meta: str = "") -> str:
    return f"<html><head>{meta}<title>{title}</title></head><body><article><p>{body}</p></article></body></html>"


def test_pages_are_decoded_by_header_then_meta_then_detection(tmp_path):
    web = synthweb.SyntheticWeb()
    english = " ".join(synthweb.prose(random.Random(3), 4))
    stray = charset_page("Café", f"The café’s naïve owner said {english} \xe9 Ended.").encode("utf-8")
    stray = stray.replace("\xe9 Ended".encode("utf-8"), b"\xe9 Ended")  # one Latin-1 byte in UTF-8
    web.pages["/stray.html"] = synthweb.Page(body=stray, content_type="text/html; charset=utf-8")
    expected = {"/stray.html": ("Café", "header:utf-8")}
    for codec, (title, sentence) in CHARSET_PAGES.items():
        placements = {"header": (f"text/html; charset={codec}", ""),
                      "meta": ("text/html", f'<meta charset="{codec}">'),
                      "http-equiv": ("text/html", f'<meta http-equiv="Content-Type" content="text/html; charset={codec}">'),
                      "detected": ("text/html", "")}
        for where, (content_type, meta) in placements.items():
            path = f"/{codec}/{where}.html"
            web.pages[path] = synthweb.Page(body=charset_page(title, sentence * 6, meta).encode(codec),
                                            content_type=content_type)
            how = {"header": "header", "http-equiv": "meta"}.get(where, where)
            expected[path] = (title, f"{how}:{'cp932' if codec == 'shift_jis' else codec.replace('windows-', 'cp')}")
    web.url_paths = list(web.pages)
    with synthweb.serve(web) as srv:
        shard = url_shard(tmp_path, [synthweb.base_url(srv) + p for p in web.url_paths])
        cfg = ScrapeConfig(timeout_s=5.0, allow_private_addresses=True, extract_workers=0)
        manifest = scrape_shard(shard, tmp_path / "sc" / "urls.parquet", cfg)
    rows = {r["url"].split(":", 2)[2].split("/", 1)[1]: r for r in
            pq.read_table(tmp_path / "sc" / "urls.parquet").to_pylist()
            + pq.read_table(tmp_path / "sc" / ".rejects" / "urls.parquet").to_pylist()}
    for path, (title, _) in expected.items():
        assert rows[path.lstrip("/")]["title"] == title, path
    assert manifest["charsets"] == dict(sorted(Counter(how for _, how in expected.values()).items()))
    text = rows["stray.html"]["text"]
    assert "The café’s naïve owner said" in text and text.count("\ufffd") == 1 and "Ã" not in text


@contextmanager
def unreliable_server():
    """/flaky/N answers 503 twice, then the page; /busy answers 429 asking for 1 s (Retry-After), then the
    page; /down always 503; /slow/N takes 0.3 s; /private/N is disallowed by /robots.txt. It records every
    request's path and time, and the most /slow/ requests in flight at once."""
    log, lock, state = [], threading.Lock(), {"now": 0, "most": 0}
    page = ("<html><head><title>Steady</title></head><body><article><p>" + "A steady paragraph of text. " * 40
            + "</p></article></body></html>").encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status: int, body: bytes, content_type: str = "text/html", **headers):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            with lock:
                seen = sum(1 for p, _ in log if p == self.path)
                log.append((self.path, time.monotonic()))
            if self.path == "/robots.txt":
                self.answer(200, b"User-agent: *\nDisallow: /private/\n", "text/plain")
            elif self.path.startswith("/flaky/") and seen < 2 or self.path == "/down":
                self.answer(503, b"try later")
            elif self.path == "/busy" and seen == 0:
                self.answer(429, b"slow down", Retry_After="1")
            else:
                if self.path.startswith("/slow/"):  # requests in flight at once, counted before any answer
                    with lock:
                        state["now"] += 1
                        state["most"] = max(state["most"], state["now"])
                    time.sleep(0.3)
                    with lock:
                        state["now"] -= 1
                self.answer(200, page)

        def log_message(self, *args):
            pass

    with serving(Handler, "127.0.0.1") as base:
        yield base, log, state


def test_transient_failures_are_retried_hosts_are_spared_and_robots_txt_is_heeded(tmp_path):
    paths = ["/flaky/1", "/busy", "/down", "/private/1", *(f"/slow/{i}" for i in range(8))]
    cfg = ScrapeConfig(timeout_s=5.0, allow_private_addresses=True, extract_workers=0, concurrency=8,
                       per_host_concurrency=2, retries=2, retry_wait_s=0.05, robots_txt=True)
    with unreliable_server() as (base, log, state):
        shard = url_shard_of(tmp_path / "urls.parquet", [base + p for p in paths])
        manifest = scrape_shard(shard, tmp_path / "sc" / "urls.parquet", cfg)
    kept = {r["url"].removeprefix(base) for r in pq.read_table(tmp_path / "sc" / "urls.parquet").to_pylist()}
    rejects = {r["url"].removeprefix(base): r["reason"]
               for r in pq.read_table(tmp_path / "sc" / ".rejects" / "urls.parquet").to_pylist()}
    assert kept == {"/flaky/1", "/busy", *(f"/slow/{i}" for i in range(8))}
    assert rejects == {"/down": "status=503", "/private/1": "robots_disallowed"}
    tries = {p: [t for q, t in log if q == p] for p in ("/flaky/1", "/busy", "/down", "/private/1", "/robots.txt")}
    assert [len(tries[p]) for p in tries] == [3, 2, 3, 0, 1]  # /down: the first try and 2 retries; robots.txt once
    assert tries["/busy"][1] - tries["/busy"][0] >= 1.0  # Retry-After waited for
    assert state["most"] == 2  # one host, at most per_host_concurrency at once (of 8 workers)
    assert manifest["retries"] == 2 + 1 + 2


def without_times(path: Path) -> pa.Table:
    return pq.read_table(path).drop_columns(["elapsed_s", "fetched_at"])


def article_shard(tmp_path: Path, server, count: int) -> Path:
    base = synthweb.base_url(server)
    return url_shard(tmp_path, [f"{base}/article/{i}.html" for i in range(count)])


def test_a_scrape_commits_each_chunk_and_writes_the_shard_one_chunk_would(tmp_path, server):
    shard = article_shard(tmp_path, server, 10)
    saved = []
    manifest = scrape_shard(shard, tmp_path / "chunked" / "urls.parquet", ScrapeConfig(**{**FAST.__dict__, "chunk_urls": 3}),
                            saved.append)
    scrape_shard(shard, tmp_path / "whole" / "urls.parquet", FAST)
    assert sorted(p.name.split("-")[0] for p in saved) == ["00000", "00001", "00002", "00003"]
    assert [pq.read_table(p).num_rows for p in sorted(saved)] == [3, 3, 3, 1]
    assert manifest["counts"]["input"] == 10 and manifest["resumed"] == 0
    for name in ("urls.parquet", ".rejects/urls.parquet"):
        assert without_times(tmp_path / "chunked" / name) == without_times(tmp_path / "whole" / name)
    assert not list((tmp_path / "chunked").glob(".*.journal.jsonl"))


def test_a_scrape_resumed_from_the_committed_chunks_alone_fetches_only_the_rest(tmp_path, server):
    """Another machine has only what was committed (two chunks of three): it fetches the other four URLs."""
    shard = article_shard(tmp_path, server, 10)
    cfg = ScrapeConfig(**{**FAST.__dict__, "chunk_urls": 3, "concurrency": 1})
    committed = []

    def crash_after_two(chunk: Path) -> None:
        committed.append(chunk.read_bytes())
        if len(committed) == 2:
            raise KeyboardInterrupt  # the machine is gone
    with pytest.raises(KeyboardInterrupt):
        scrape_shard(shard, tmp_path / "lost" / "urls.parquet", cfg, crash_after_two)
    other = tmp_path / "other" / "urls.parquet"
    for n, data in enumerate(committed):  # what the task fetches from WORK before it resumes
        chunk_path(other, n, settings_tag(cfg)).parent.mkdir(parents=True, exist_ok=True)
        chunk_path(other, n, settings_tag(cfg)).write_bytes(data)
    before = dict(server.hits)
    manifest = scrape_shard(shard, other, cfg)
    fetched = sorted(k for k, v in server.hits.items() if v != before.get(k))
    assert fetched == [f"/article/{i}.html" for i in range(6, 10)] and manifest["resumed"] == 6
    scrape_shard(shard, tmp_path / "whole" / "urls.parquet", FAST)
    assert without_times(other) == without_times(tmp_path / "whole" / "urls.parquet")


def test_a_journal_line_torn_by_a_crash_is_fetched_again_not_lost(tmp_path, server):
    shard = article_shard(tmp_path, server, 4)
    out = tmp_path / "sc" / "urls.parquet"
    cfg = ScrapeConfig(**{**FAST.__dict__, "concurrency": 1})
    first = tmp_path / "first" / "urls.parquet"
    scrape_shard(shard, first, cfg, lambda chunk: None)
    entries = pq.read_table(chunk_path(first, 0, settings_tag(cfg))).column("entry").to_pylist()
    out.parent.mkdir(parents=True)
    journal = out.with_name(f".urls.chunk-00000-{settings_tag(cfg)}.journal.jsonl")  # what a crash left
    journal.write_text(entries[0] + "\n" + entries[1][: len(entries[1]) // 2])  # the second line torn
    before = dict(server.hits)
    manifest = scrape_shard(shard, out, cfg)
    assert sorted(k for k, v in server.hits.items() if v != before.get(k)) == ["/article/1.html", "/article/2.html",
                                                                               "/article/3.html"]
    assert manifest["resumed"] == 1 and manifest["counts"]["input"] == 4
    assert without_times(out) == without_times(first)


@pytest.mark.parametrize("robots_status, kept", [(404, True), (503, False)])
def test_a_robots_txt_the_site_lacks_allows_everything_one_it_fails_to_give_disallows_everything(tmp_path, robots_status,
                                                                                                 kept):
    """RFC 9309 2.3.1: 4xx for /robots.txt, crawl as if there were none; 5xx (or no connection), crawl nothing."""
    page = b"<html><body><article><p>" + b"A paragraph of plain text. " * 40 + b"</p></article></body></html>"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            status, body = (robots_status, b"no") if self.path == "/robots.txt" else (200, page)
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if self.path == "/robots.txt" else "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    cfg = ScrapeConfig(timeout_s=5.0, allow_private_addresses=True, extract_workers=0, retries=0, robots_txt=True)
    with serving(Handler, "127.0.0.1") as base:
        manifest = scrape_shard(url_shard_of(tmp_path / "urls.parquet", [base + "/a", base + "/b"]),
                                tmp_path / "sc" / "urls.parquet", cfg)
    assert manifest["counts"]["kept"] == (2 if kept else 0)
    assert manifest["reasons"] == ({} if kept else {"robots_disallowed": 2})
