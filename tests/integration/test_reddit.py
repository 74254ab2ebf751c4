"""A run that starts from Reddit submission dumps (generated in Pushshift's schema, compressed with zstd's 2 GiB
window as the newer months are): their links by OpenWebText's rules become the URL lists, each URL carrying its
submission into its document's metadata; a link the rules leave out is never fetched; `textmill reddit-urls`
killed part-way leaves nothing that looks finished, and its rerun writes the bytes an uninterrupted one writes."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from urllib.parse import urlsplit

import pyarrow.parquet as pq

from support.cli import run_cli
from support.runs import make_run
from textmill.demo import synthweb
from textmill.demo.reddit import submissions, write_dumps
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
