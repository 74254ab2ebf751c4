"""Looking URLs up in a web archive (pipeline/archive.py): a CDXJ index searched by bisection finds what a scan of
it finds, the newest capture with status 200 of the very URL asked; a capture's record read alone is its page."""

import asyncio
import json
import random

import aiohttp
import pytest

from support.archive_server import serve_archive
from support.bombs import gzip_member_of_zeros, response_of_zeros
from support.memory import run_measured
from textmill.demo import synthweb
from textmill.demo.archive import write_archive
from textmill.pipeline.archive import Archive, CdxjFiles, Capture, cdxj_lines, newest, read_capture, surt_key
from textmill.pipeline.blacklist import normalize_url
from textmill.pipeline.stage_configs import ScrapeConfig


def test_bisection_finds_what_a_scan_finds_for_every_url_asked(tmp_path):
    rng = random.Random(5)
    hosts = ["example.com", "www.example.com", "a.example.org", "example.com:8080"]
    entries = []
    for i in range(3000):
        url = f"http://{rng.choice(hosts)}/p/{rng.randrange(400)}?b={rng.randrange(3)}&a=1"
        entries.append((surt_key(normalize_url(url)[0]), f"2024{rng.randrange(10**10):010d}",
                        {"url": url, "status": rng.choice(["200", "200", "301", "404"]), "filename": "f.warc.gz",
                         "offset": str(i), "length": "10"}))
    entries.sort(key=lambda e: (e[0], e[1]))
    (tmp_path / "index.cdxj").write_text("".join(f"{k} {t} {json.dumps(e)}\n" for k, t, e in entries))
    index = CdxjFiles.of(tmp_path / "index.cdxj")
    asked = {normalize_url(e["url"])[0] for _, _, e in entries[::7]} | {"http://example.com/absent", "http://zzz.example/"}
    for url in sorted(asked):
        scanned = newest(url, ({**e, "timestamp": t} for _, t, e in entries))
        assert index.lookup_now(url) == scanned
    assert index.lookup_now("http://example.com/absent") is None
    assert sum(index.lookup_now(u) is not None for u in asked) > len(asked) // 2


def test_a_capture_read_alone_is_its_page_and_the_index_names_every_response(tmp_path):
    web = synthweb.build_web(seed=7, articles=12, near_duplicates=0, foreign=0, mojibake=0, short=0)
    warc = write_archive(web, "http://127.0.0.1:8000", tmp_path / "a.warc.gz")
    lines = cdxj_lines(warc, "a.warc.gz")
    assert len(lines) == sum(web.pages[path].behaviour == "static" for path in web.url_paths)
    for line in lines:
        entry = json.loads(line.split(" ", 2)[2])
        capture = Capture(entry["url"], line.split(" ")[1], "a.warc.gz", int(entry["offset"]), int(entry["length"]))
        got = asyncio.run(read_capture(capture, str(tmp_path), None, 5_000_000))
        page = web.pages[entry["url"].removeprefix("http://127.0.0.1:8000")]
        if entry["status"] == "200" and page.content_type.startswith("text/html") and len(page.body) <= 5_000_000:
            assert (got.status, got.body, got.reason) == (200, page.body, None)
        else:  # another status, not HTML, or too large

            assert got.reason and got.body is None


def archive_of(tmp_path):
    """A WARC file of the synthetic web under tmp_path/archive, its CDXJ index, and the URL of an HTML page it holds
    with that page's body."""
    web = synthweb.build_web(seed=7, articles=6, near_duplicates=0, foreign=0, mojibake=0, short=0)
    (tmp_path / "archive").mkdir()
    warc = write_archive(web, "http://127.0.0.1:8000", tmp_path / "archive" / "a.warc.gz")
    lines = cdxj_lines(warc, "a.warc.gz")
    (tmp_path / "index.cdxj").write_text("".join(line + "\n" for line in lines))
    for line in lines:
        entry = json.loads(line.split(" ", 2)[2])
        page = web.pages[entry["url"].removeprefix("http://127.0.0.1:8000")]
        if entry["status"] == "200" and page.content_type.startswith("text/html"):
            return lines, entry["url"], page.body
    raise AssertionError("no HTML page archived")


def page_of(url: str, **settings):
    """Archive(...).page(url) as the scrape asks it, with a session of its own; quick retries."""
    cfg = ScrapeConfig(**{"retries": 2, "retry_wait_s": 0.01, **settings})

    async def ask():
        async with aiohttp.ClientSession() as session:
            return await Archive(cfg, session).page(url)

    return asyncio.run(ask())


def with_entry(line: str, **changed) -> str:
    key, timestamp, entry = line.split(" ", 2)
    return f"{key} {timestamp} {json.dumps({**json.loads(entry), **changed})}"


def test_each_index_server_answer_that_fails_is_asked_again_then_fetched_live_or_rejected(tmp_path):
    """Issue 62: the index server answering 503 once for one URL (Common Crawl's does under load), `this is not
    json`, or a capture without its timestamp or file each ended the shard in a traceback."""
    lines, url, body = archive_of(tmp_path)
    with serve_archive(tmp_path / "archive", tmp_path / "index.cdxj") as server:
        index, prefix = server.base + "index", server.base
        server.scripted[url] = [(503, b"busy", {"Retry-After": "0"}), (503, b"busy", {})]
        got, capture = page_of(url, archive_index=index, archive_prefix=prefix)
        assert (got.status, got.body, capture.url) == (200, body, url) and server.lookups == 3  # third time lucky
        for fallback, expected in ((True, (None, None)), (False, "archive_error=index_status_503")):
            server.scripted[url] = [(503, b"busy", {"Retry-After": "0"})] * 3
            got, capture = page_of(url, archive_index=index, archive_prefix=prefix, archive_fallback=fallback)
            assert (got, capture) == expected if fallback else (got.reason, capture) == (expected, None)
        entry = json.loads(lines[0].split(" ", 2)[2])
        for answer in (b"this is not json\n", json.dumps({**entry, "url": url, "timestamp": None}).encode(),
                       json.dumps({"url": url, "status": "200", "timestamp": "20240101000000"}).encode()):
            server.scripted[url] = [(200, answer, {})]
            got, _ = page_of(url, archive_index=index, archive_prefix=prefix, archive_fallback=False)
            assert got.reason == "archive_error=bad_capture", answer
        server.scripted[url] = [(200, answer, {})]
        assert page_of(url, archive_index=index, archive_prefix=prefix) == (None, None)  # fetched live instead


@pytest.mark.parametrize("changed, reason", [
    ({"offset": "²"}, "archive_error=bad_capture"), ({"offset": "-5"}, "archive_error=bad_capture"),
    ({"length": "1000000000000"}, "too_large"), ({"length": 0}, "archive_error=bad_capture"),
    ({"filename": "../outside.warc.gz"}, "archive_error=bad_capture"),
    ({"filename": "/etc/hostname"}, "archive_error=bad_capture"),
    ({"filename": "link/outside.warc.gz"}, "archive_error=outside_prefix"),
    ({"filename": "gone.warc.gz"}, "archive_error=missing_file"),
])
def test_a_capture_whose_fields_are_not_of_their_shape_is_that_urls_reject(tmp_path, changed, reason):
    """Issue 62: `"offset": "²"` or `"-5"`, a length of 10^12 (MemoryError), a missing WARC file each ended the
    shard; `"filename": "../outside.warc.gz"` read a WARC beside the prefix into the corpus, and `/etc/hostname`
    was opened. Each is the URL's reject now; nothing outside archive_prefix is read."""
    lines, url, _ = archive_of(tmp_path)
    (tmp_path / "outside.warc.gz").write_bytes((tmp_path / "archive" / "a.warc.gz").read_bytes())
    (tmp_path / "archive" / "link").symlink_to(tmp_path)
    line = next(line for line in lines if json.loads(line.split(" ", 2)[2])["url"] == url)
    (tmp_path / "index.cdxj").write_text(with_entry(line, **changed) + "\n")
    got, _ = page_of(url, archive_index=str(tmp_path / "index.cdxj"), archive_prefix=str(tmp_path / "archive"),
                     archive_fallback=False)
    assert (got.reason, got.body) == (reason, None)


def test_an_index_line_that_is_not_json_or_only_its_key_is_passed_over(tmp_path):
    lines, url, body = archive_of(tmp_path)
    line = next(line for line in lines if json.loads(line.split(" ", 2)[2])["url"] == url)
    key, timestamp, _ = line.split(" ", 2)
    for bad in (f"{key}", f"{key} {timestamp}", f"{key} {timestamp} {{not json", f"{key} 2099 [1, 2]"):
        (tmp_path / "index.cdxj").write_text(f"{bad}\n")
        got, _ = page_of(url, archive_index=str(tmp_path / "index.cdxj"), archive_prefix=str(tmp_path / "archive"),
                         archive_fallback=False)
        assert got.reason == "archive_error=bad_capture", bad
        (tmp_path / "index.cdxj").write_text("\n".join(sorted([bad, line])) + "\n")  # beside a good capture
        got, _ = page_of(url, archive_index=str(tmp_path / "index.cdxj"), archive_prefix=str(tmp_path / "archive"))
        assert got.body == body, bad


def test_a_capture_of_a_gigabyte_of_zeros_is_too_large_without_being_inflated(tmp_path):
    """Issue 62: a capture that is one gzip member of 1 GiB of zeros took 3.2 GB of memory, then the shard was
    lost. It is inflated only up to what a page of max_bytes can be: `too_large`, the process under 500 MB."""
    lines, url, _ = archive_of(tmp_path)
    head, tail = response_of_zeros(url, "2024-01-01T00:00:00Z", 1)
    with open(tmp_path / "archive" / "bomb.warc.gz", "wb") as f:
        gzip_member_of_zeros(f, head, 1, tail)
    size = (tmp_path / "archive" / "bomb.warc.gz").stat().st_size
    line = next(line for line in lines if json.loads(line.split(" ", 2)[2])["url"] == url)
    (tmp_path / "index.cdxj").write_text(with_entry(line, filename="bomb.warc.gz", offset="0", length=str(size)) + "\n")
    code = ("import asyncio, sys; from textmill.pipeline.archive import Archive; "
            "from textmill.pipeline.stage_configs import ScrapeConfig; "
            "cfg = ScrapeConfig(archive_index=sys.argv[2], archive_prefix=sys.argv[3]); "
            "result = asyncio.run(Archive(cfg, None).page(sys.argv[1]))[0].reason")
    reason, peak_mb = run_measured(code, url, str(tmp_path / "index.cdxj"), str(tmp_path / "archive"))
    assert reason == "too_large" and peak_mb < 500, (reason, peak_mb)
