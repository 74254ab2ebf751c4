"""The scrape stage as a process: killed and resumed without fetching again, and `textmill extract` on a kept crawl."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq

from support.cli import run_cli
from support.stages import url_shard
from textmill.demo import synthweb
from textmill.pipeline.scrape import ScrapeConfig
from textmill.workflows.commands import run_stage


def test_killed_scrape_resumes_without_refetching(tmp_path):
    web = synthweb.build_web(seed=3, articles=40, near_duplicates=0, foreign=0, mojibake=0, short=0, faults=False)
    with synthweb.serve(web, latency_s=0.1) as srv:
        base = synthweb.base_url(srv)
        shard = url_shard(tmp_path, [base + p for p in web.url_paths])
        out = tmp_path / "sc"
        cmd = [sys.executable, "-m", "textmill.cli", "scrape", str(shard), "-o", str(out),
               "--allow-private-addresses", "--concurrency", "2", "--extract-workers", "0"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline, journal = time.monotonic() + 60, None  # the journal of its one chunk
        while time.monotonic() < deadline and (journal is None or journal.read_text().count("\n") < 10):
            journal = next(out.glob(".urls-00000.chunk-00000-*.journal.jsonl"), None)
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert not (out / "urls-00000.parquet").exists() and not (out / ".manifests" / "urls-00000.json").exists()
        done_before = {json.loads(line)["row"]["url"] for line in journal.read_text().splitlines() if line.endswith("}")}
        assert 10 <= len(done_before) < 40
        hits_before = dict(srv.hits)

        [m] = run_stage("scrape", [tmp_path / "bl"], out, {"scrape": ScrapeConfig(allow_private_addresses=True, concurrency=2,
                                                                                  extract_workers=0)}).manifests
    assert m["counts"] == {"input": 40, "kept": 40, "rejected": 0, "output_rows": 40}
    assert m["resumed"] == len(done_before)
    for url in done_before:  # journaled pages were not fetched again
        path = url.removeprefix(base)
        assert srv.hits[path] == hits_before[path] == 1
    assert not journal.exists()
    assert pq.read_table(out / "urls-00000.parquet").column("url").to_pylist() == [base + p for p in web.url_paths]


def test_extract_switches_extractors_on_a_kept_crawl_without_fetching(tmp_path, small_web, server):
    base = synthweb.base_url(server)
    paths = ["/article/1.html", "/article/2.html", "/fr/0.html", "/missing.html", "/empty.html"]
    (tmp_path / "urls.txt").write_text("".join(f"{base}{p}\n" for p in paths))
    assert run_cli("blacklist", str(tmp_path / "urls.txt"), "-o", str(tmp_path / "bl")).returncode == 0
    fetch = ["--allow-private-addresses", "--extract-workers", "0", "--timeout-s", "5"]
    for extractor, out, keep in (("newspaper", "news", ["--keep-html"]), ("trafilatura", "traf", [])):
        r = run_cli("scrape", str(tmp_path / "bl"), "-o", str(tmp_path / out), "--extractor", extractor, *fetch, *keep)
        assert r.returncode == 0, r.stderr
    hits = dict(server.hits)
    r = run_cli("extract", str(tmp_path / "news"), "-o", str(tmp_path / "again"), "--extractor", "trafilatura")
    assert r.returncode == 0, r.stderr
    assert server.hits == hits  # nothing fetched
    for name in ("urls-00000.parquet", ".rejects/urls-00000.parquet"):
        again = pq.read_table(tmp_path / "again" / name).drop_columns(["elapsed_s", "fetched_at"])
        assert again == pq.read_table(tmp_path / "traf" / name).drop_columns(["elapsed_s", "fetched_at"]), name
    manifest = json.loads((tmp_path / "again" / ".manifests" / "urls-00000.json").read_text())
    assert manifest["params"]["extractor"] == "trafilatura" and manifest["counts"]["input"] == len(paths)
    assert manifest["charsets"] == {"header:utf-8": 4}  # the pages fetched whole; the 404 keeps its reason
    missing = run_cli("extract", str(tmp_path / "traf"), "-o", str(tmp_path / "none"))
    kept_html = tmp_path / "traf" / ".html" / "urls-00000.parquet"
    assert missing.returncode == 2 and f"has no kept HTML ({kept_html}); scrape with --keep-html" in missing.stderr


def test_ctrl_c_during_a_scrape_ends_in_one_line_and_no_traceback(tmp_path):
    """Ctrl-C reaches the whole process group, the extraction processes too: the command says it was interrupted
    in one line, and they leave without a word (they printed KeyboardInterrupt and BrokenPipeError tracebacks)."""
    # 200 pages at 0.3 s each, 2 at a time: 30 s of fetching at least, so the Ctrl-C after the fourth page lands
    # mid-scrape however busy the machine (with 40, a scrape on a loaded machine finished first).
    web = synthweb.build_web(seed=3, articles=200, near_duplicates=0, foreign=0, mojibake=0, short=0, faults=False)
    with synthweb.serve(web, latency_s=0.3) as srv:
        base = synthweb.base_url(srv)
        shard = url_shard(tmp_path, [base + p for p in web.url_paths])
        out = tmp_path / "sc"
        cmd = [sys.executable, "-m", "textmill.cli", "scrape", str(shard), "-o", str(out), "--allow-private-addresses",
               "--concurrency", "2", "--extract-workers", "2"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline, journal = time.monotonic() + 120, None
        while time.monotonic() < deadline and (journal is None or journal.read_text().count("\n") < 4):
            journal = next(out.glob(".urls-00000.chunk-00000-*.journal.jsonl"), None)  # pages extracted: workers up
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "textmill: interrupted" in stderr and "Traceback" not in stderr, stderr


PROGRESS_LINE = re.compile(r"^\S+ tasks? [\d-]+: |^scrape \S+: ")


def test_ctrl_c_during_a_run_with_two_workers_ends_at_once_in_one_line_and_is_recorded(tmp_path):
    """`textmill run --workers 2`: the forked workers leave quietly (each printed a KeyboardInterrupt traceback),
    and the command ends (a worker caught inside Luigi's failure handling kept retrying the scheduler, which had
    ended with the command, for minutes, and the command waited for it), recording the run as interrupted. A run
    killed outright is recorded as killed by the next one."""
    from support.runs import write_config

    web = synthweb.build_web(seed=3, articles=200, near_duplicates=0, foreign=0, mojibake=0, short=0, faults=False)
    runs = tmp_path / "work" / "runs"
    with synthweb.serve(web, latency_s=0.3) as srv:
        base = synthweb.base_url(srv)
        (tmp_path / "urls").mkdir()
        (tmp_path / "urls" / "RS_0.txt").write_text("".join(base + p + "\n" for p in web.url_paths))
        (tmp_path / "eval.jsonl").write_text(json.dumps({"text": "an evaluation passage of eight words or more"}) + "\n")
        config = write_config(tmp_path, work=tmp_path / "work", min_tokens=32, vocab_size=600, train="false",
                              train_iters=1)
        config.write_text(config.read_text().replace("extract_workers = 0", "extract_workers = 2\nconcurrency = 2"))
        cmd = [sys.executable, "-m", "textmill.cli", "run", str(config), "--workers", "2"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline, journal = time.monotonic() + 120, None
        while time.monotonic() < deadline and (journal is None or journal.read_text().count("\n") < 4):
            journal = next((tmp_path / "work" / "2-scrape").glob("*/.RS_0-*.journal.jsonl"), None)
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr
        [interrupted] = runs.iterdir()
        said = [line for line in stderr.splitlines() if not PROGRESS_LINE.match(line)]  # a busy machine's 30 s
        assert said == ["textmill: interrupted; finished shards are kept, unfinished ones will be redone; "
                        f"recorded in {interrupted}"], stderr
        record = json.loads((interrupted / "run.json").read_text())
        assert record["status"] == "interrupted" and record["funnel"][0]["stage"] == "blacklist"
        assert "<b>interrupted</b>" in (interrupted / "report.html").read_text()

        # Killed outright, a run cannot write its end: the next run finds it still running and records it killed.
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list(runs.glob("*/run.json"))) < 2:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        killed = max(runs.iterdir())
        assert json.loads((killed / "run.json").read_text())["status"] == "running"
        srv.latency_s = 0.0
        r = run_cli("run", str(config), "--workers", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"textmill run: the run of {killed.name} was killed before its end; recorded so in {killed}" in r.stderr
    record = json.loads((killed / "run.json").read_text())
    assert record["status"] == "killed" and record["seconds"] is None and (killed / "report.html").exists()
