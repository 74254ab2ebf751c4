"""Looking URLs up in a web archive (pipeline/archive.py): a CDXJ index searched by bisection finds what a scan of
it finds, the newest capture with status 200 of the very URL asked; a capture's record read alone is its page."""

import asyncio
import json
import random

from textmill.demo import synthweb
from textmill.demo.archive import write_archive
from textmill.pipeline.archive import CdxjFiles, Capture, cdxj_lines, newest, read_capture, surt_key
from textmill.pipeline.blacklist import normalize_url


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
