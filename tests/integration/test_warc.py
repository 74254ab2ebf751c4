"""A run that starts from web archives: the synthetic web, crawled into a WARC file, gives the documents its live
scrape gives (same extractor, same limits, same ids), with no fetch; `textmill warc` killed part-way leaves nothing
that looks finished, and its rerun writes the bytes an uninterrupted one writes."""

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq

from support.cli import run_cli
from support.runs import copy_run
from textmill.demo import synthweb
from textmill.demo.archive import write_archive
from textmill.pipeline.shards import list_shards, rejects_path


def rows_of(stage, name: str = "") -> dict[str, dict]:
    """The kept documents (or the rejects' reasons, name "rejects") of a stage's folders (one per unit) by URL."""
    shards = list_shards(list(stage.iterdir()))
    if name == "rejects":
        return {row["url"]: row["reason"] for shard in shards for row in pq.read_table(rejects_path(shard)).to_pylist()}
    return {row["url"]: row for shard in shards for row in pq.read_table(shard).to_pylist()}


def test_a_run_from_an_archive_of_the_web_keeps_what_its_live_scrape_keeps_and_fetches_nothing(tmp_path, site,
                                                                                              finished_run):
    web, server = site
    config = copy_run(finished_run.root, tmp_path)
    write_archive(web, synthweb.base_url(server), tmp_path / "archives" / "crawl.warc.gz")
    config.write_text(config.read_text().replace('urls = ["urls"]', 'warcs = ["archives"]\n[warc]\nresponses_per_shard = 25'))
    hits = dict(server.hits)
    result = run_cli("run", str(config), "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert server.hits == hits  # nothing fetched
    assert "warc: 3 shard(s)" in result.stdout and "blacklist" not in result.stdout

    from_archive, from_web = rows_of(tmp_path / "work" / "2-warc"), rows_of(tmp_path / "work" / "2-scrape")
    # The live scrape follows /redirect/0.html to its target; in an archive the redirect is a record of its own.
    redirects = {url for url, row in from_web.items() if row["final_url"] != url}
    assert redirects and set(from_archive) == set(from_web) - redirects
    for url, row in from_archive.items():
        assert {k: row[k] for k in ("id", "title", "text", "word_count", "status")} == \
            {k: from_web[url][k] for k in ("id", "title", "text", "word_count", "status")}
    rejected = rows_of(tmp_path / "work" / "2-warc", "rejects")
    assert rejected[synthweb.base_url(server) + "/missing.html"] == "status=404"

    again = run_cli("run", str(config))
    assert again.returncode == 0 and "textmill run: done:" in again.stdout


def test_textmill_warc_killed_part_way_leaves_no_shard_and_its_rerun_writes_the_same_bytes(tmp_path):
    web = synthweb.build_web(seed=3, articles=1200, near_duplicates=0, foreign=0, mojibake=0, short=0, faults=False)
    archive = write_archive(web, "http://127.0.0.1:8000", tmp_path / "crawl.warc.gz")
    options = ["--responses-per-shard", "300", "--extract-workers", "1"]
    done = run_cli("warc", str(archive), "-o", str(tmp_path / "whole"), *options)
    assert done.returncode == 0, done.stderr
    assert "warc: 4 shard(s), 1200 in, 1200 kept" in done.stdout

    out = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "textmill.cli", "warc", str(archive), "-o", str(out), *options],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (out / ".manifests" / "crawl-00000.json").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    finished = {p.name for p in (out / ".manifests").iterdir()}
    assert "crawl-00000.json" in finished and len(finished) < 4
    assert {p.name for p in out.glob("*.parquet")} == {name.replace(".json", ".parquet") for name in finished}

    rerun = run_cli("warc", str(archive), "-o", str(out), *options)
    assert rerun.returncode == 0, rerun.stderr
    for shard in sorted((tmp_path / "whole").glob("*.parquet")):
        assert (out / shard.name).read_bytes() == shard.read_bytes()
        assert rejects_path(out / shard.name).read_bytes() == rejects_path(shard).read_bytes()
