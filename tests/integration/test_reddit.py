"""A run that starts from Reddit submission dumps (generated in Pushshift's schema, compressed with zstd's 2 GiB
window as the newer months are): their links by OpenWebText's rules become the URL lists, each URL carrying its
submission into its document's metadata; a link the rules leave out is never fetched, nor one a web archive holds
(looked up in its index); `textmill reddit-urls` killed part-way leaves nothing that looks finished, and its rerun
writes the bytes an uninterrupted one writes."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from urllib.parse import urlsplit

import pyarrow.parquet as pq
import pytest

from support.cli import run_cli
from support.archive_server import serve_archive
from support.runs import make_run
from textmill.demo import synthweb
from textmill.demo.archive import CRAWLED_AT, write_archive
from textmill.demo.reddit import submissions, write_dumps
from textmill.pipeline.archive import cdxj_lines
from textmill.pipeline.blacklist import normalize_url
from textmill.pipeline.shards import list_shards, rejects_path

MONTHS = ("2011-01", "2011-02", "2011-03")


def test_a_run_from_dumps_fetches_only_the_links_the_rules_keep_and_carries_each_submission(tmp_path, site):
    web, server = site
    config = make_run(tmp_path, site)
    config.write_text(config.read_text().replace('urls = ["urls"]', 'reddit_dumps = ["dumps"]'))
    urls = synthweb.url_list(web, server)
    left_out = tuple(u for u in urls if u.endswith(("/article/38.html", "/article/39.html", "/short/1.html")))
    listed = [u for u in urls if u not in left_out]
    write_dumps(listed, tmp_path / "dumps", MONTHS, seed=3, left_out=left_out)
    taken: dict[str, list[dict]] = defaultdict(list)  # the submissions whose link the rules keep, by URL
    for rows in submissions(listed, MONTHS, 3, left_out).values():
        for row in rows:
            link = row["url"].startswith(("http://", "https://"))  # the list's junk lines ("ftp://...") are not
            if link and not row["is_self"] and row["score"] >= 3 and not row["over_18"]:
                taken[row["url"]].append(row)
    assert len(left_out) == 3 and not set(left_out) & set(taken)
    hits = dict(server.hits)

    result = run_cli("run", str(config), "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    fetched = {path for path, count in server.hits.items() if count != hits.get(path, 0)}
    assert fetched and not fetched & {urlsplit(u).path for u in left_out}  # never fetched

    # Every page scraped is a kept link, and its document names the first submission that linked to it.
    scraped = [row for shard in list_shards([*(tmp_path / "work" / "2-scrape").glob("*")])
               for path in (shard, rejects_path(shard)) for row in pq.read_table(path).to_pylist()]
    by_url = {normalize_url(u)[0]: rows[0] for u, rows in taken.items()}
    assert scraped and {row["url"] for row in scraped} <= set(by_url)
    for row in scraped:
        first = by_url[row["url"]]
        assert json.loads(row["metadata"]) == {"submission_id": first["id"], "score": first["score"],
                                               "subreddit": first["subreddit"], "created_utc": int(first["created_utc"])}
    cleaned = [row for shard in list_shards([*(tmp_path / "work" / "4-clean").glob("*")])
               for row in pq.read_table(shard).to_pylist()]
    assert cleaned and all(json.loads(row["metadata"])["submission_id"] for row in cleaned)

    [run] = (tmp_path / "work" / "runs").iterdir()
    funnel = json.loads((run / "run.json").read_text())["funnel"]
    assert [stage["stage"] for stage in funnel][:2] == ["reddit-urls", "blacklist"]
    assert funnel[0]["kept"] == sum(len(rows) for rows in taken.values())

    again = run_cli("run", str(config))
    assert again.returncode == 0 and "textmill run: done:" in again.stdout
    assert not {path for path, count in server.hits.items() if count != hits.get(path, 0)} - fetched


def test_reddit_urls_killed_part_way_leaves_no_list_and_its_rerun_writes_the_same_bytes(tmp_path):
    urls = [f"http://site{i % 997}.example/page/{i}" for i in range(300_000)]
    [dump] = write_dumps(urls, tmp_path / "dumps", ("2019-06",), seed=5)
    done = run_cli("reddit-urls", str(dump), "-o", str(tmp_path / "whole"))
    assert done.returncode == 0, done.stderr
    assert "reddit-urls: 1 shard(s)" in done.stdout

    out = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "textmill.cli", "reddit-urls", str(dump), "-o", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while not list(out.glob(".RS_2019-06.jsonl.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (out / "RS_2019-06.jsonl").exists() and not (out / ".manifests" / "RS_2019-06.json").exists()

    rerun = run_cli("reddit-urls", str(dump), "-o", str(out))
    assert rerun.returncode == 0, rerun.stderr
    for name in ("RS_2019-06.jsonl", ".rejects/RS_2019-06.parquet"):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == ["RS_2019-06.jsonl"]  # the killed
    # run's part-written list stays hidden, under its process's temporary name


@pytest.mark.parametrize("index_kind", ["cdxj", "server"])
def test_a_run_from_dumps_reads_what_an_archive_holds_and_fetches_only_the_rest(tmp_path, site, index_kind):
    """[scrape] archive_index: a URL with a capture in the archive (a CDXJ file, or an index server's API) is read
    from its WARC record by a range request, never fetched live; the others are fetched live."""
    web, server = site
    base = synthweb.base_url(server)
    config = make_run(tmp_path, site)
    urls = synthweb.url_list(web, server)
    write_dumps(urls, tmp_path / "dumps", MONTHS, seed=4)
    archived = [p for p in web.url_paths if p.startswith("/article/") and int(p.split("/")[2].split(".")[0]) % 2 == 0]
    warc = write_archive(web, base, tmp_path / "archive" / "crawl-data" / "a.warc.gz", archived)
    (tmp_path / "archive" / "index.cdxj").write_text("\n".join(cdxj_lines(warc, "crawl-data/a.warc.gz")) + "\n")
    with serve_archive(tmp_path / "archive", tmp_path / "archive" / "index.cdxj") as archive:
        index = str(tmp_path / "archive" / "index.cdxj") if index_kind == "cdxj" else archive.base + "index"
        config.write_text(config.read_text().replace('urls = ["urls"]', 'reddit_dumps = ["dumps"]').replace(
            "[scrape]\n", f'[scrape]\narchive_index = "{index}"\narchive_prefix = "{archive.base}"\n'))
        hits = dict(server.hits)
        result = run_cli("run", str(config), "--workers", "2")
        assert result.returncode == 0, result.stderr[-3000:]
        assert archive.ranges > 0 and (archive.lookups > 0) == (index_kind == "server")
    fetched = {path for path, count in server.hits.items() if count != hits.get(path, 0)}
    # What the archive holds is never fetched live (but as where a live URL redirects: /redirect/0.html, which the
    # archive holds as a 301, is fetched and followed to /article/0.html).
    targets = {page.location for page in web.pages.values() if page.location}
    assert fetched and not fetched & set(archived) - targets

    scraped = [row for shard in list_shards([*(tmp_path / "work" / "2-scrape").glob("*")])
               for row in pq.read_table(shard).to_pylist()]
    from_archive = [row for row in scraped if row["url"].removeprefix(base) in archived]
    assert len(from_archive) == archive.ranges
    assert from_archive and all(row["fetched_at"] == CRAWLED_AT and row["text"] for row in from_archive)
    assert any(row["url"].removeprefix(base) in fetched for row in scraped)
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "work" / "2-scrape").glob("*/.manifests/*.json")]
    assert sum(m["from_archive"] for m in manifests) == len(from_archive)
