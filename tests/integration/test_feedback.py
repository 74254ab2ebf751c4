"""What the commands tell a user who is not watching a terminal: progress lines at a steady interval, a
warning with its remedy when one reason rejects most of a stage's input, and the funnel at the end of a run."""

import json
import re

from support.cli import run_cli
from support.files import TEST_DATA, write_jsonl
from textmill.demo import synthweb


def test_long_steps_print_progress_lines_without_a_terminal(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTMILL_PROGRESS_S", "0")  # a line per update; the default is one every 30 s
    rows = [json.loads(line) for line, _ in zip(open(TEST_DATA / "lambada_test.jsonl"), range(300), strict=False)]
    write_jsonl(tmp_path / "docs.jsonl", [{"id": str(i), "text": r["text"]} for i, r in enumerate(rows)])
    r = run_cli("tokenize", "--input", str(tmp_path / "docs.jsonl"), "--output-prefix", str(tmp_path / "tok"),
                "--vocab-file", str(TEST_DATA / "gpt2-vocab.json"), "--merge-file", str(TEST_DATA / "gpt2-merges.txt"))
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [line for line in r.stderr.splitlines() if line.startswith("tokenize: ")]
    assert lines and re.search(r"of [\d.]+[kM]?B \(\d+%\), [\d.]+[kM]?B/s, about \S+ left", lines[0]), lines[:2]
    assert lines[-1].endswith(" done") and "(100%)" in lines[-1]
    r = run_cli("dedup", str(tmp_path / "docs.jsonl"), "-o", str(tmp_path / "dedup"))
    assert r.returncode == 0 and re.search(r"minhash docs: 300 doc, [\d,]+ doc/s", r.stderr), r.stderr[-2000:]
    # An interval that is not a number is one error line.
    monkeypatch.setenv("TEXTMILL_PROGRESS_S", "often")
    r = run_cli("dedup", str(tmp_path / "docs.jsonl"), "-o", str(tmp_path / "dedup2"))
    assert r.returncode != 0 and "TEXTMILL_PROGRESS_S must be a number of seconds, not 'often'" in r.stderr


def test_a_stage_that_rejects_most_of_its_input_for_one_reason_says_why_and_what_to_do(tmp_path, site):
    web, server = site
    (tmp_path / "urls").mkdir()
    (tmp_path / "urls" / "RS_local.txt").write_text("\n".join(synthweb.url_list(web, server)[:12]) + "\n")
    assert run_cli("blacklist", str(tmp_path / "urls"), "-o", str(tmp_path / "listed")).returncode == 0
    r = run_cli("scrape", str(tmp_path / "listed"), "-o", str(tmp_path / "pages"), "--extract-workers", "0")
    [warning] = [line for line in r.stderr.splitlines() if "warning:" in line]
    error = r.stderr.strip().splitlines()[-1]
    assert re.match(r"textmill scrape: warning: scrape rejected (\d+) of \1 \(100%\) as blocked_address: .*"
                    r"--allow-private-addresses", warning), warning
    # Nothing kept: the summary stands, and the exit status tells a script there is nothing to go on with.
    assert r.returncode == 1 and re.match(r"textmill: error: scrape kept none of the \d+ records it read "
                                          r"\(blocked_address \d+\); the rejects and their reasons: textmill inspect ",
                                          error), r.stderr
    assert re.search(r"scrape: 1 shard\(s\), (\d+) in, 0 kept, \1 rejected", r.stdout), r.stdout
    # Told, the same command fetches them, and says nothing of the kind.
    r = run_cli("scrape", str(tmp_path / "listed"), "-o", str(tmp_path / "pages"), "--extract-workers", "0",
                "--allow-private-addresses", "--timeout-s", "2")
    assert r.returncode == 0 and "warning:" not in r.stderr, r.stderr[-2000:]


def test_a_run_whose_corpus_ends_empty_prints_its_funnel_and_exits_1(tmp_path):
    """A URL list of nothing but garbage: every stage runs (on nothing), the funnel is printed, and the exit
    status tells cron the run has nothing to go on with, naming the stage that kept nothing and why."""
    from support.runs import write_config

    (tmp_path / "urls").mkdir()
    (tmp_path / "urls" / "RS_0.txt").write_text("not a url\nftp://example.com/file\n")
    (tmp_path / "eval.jsonl").write_text(json.dumps({"text": "the old lighthouse keeper counted every ship that "
                                                                "passed at night and wrote it down"}) + "\n")
    config = write_config(tmp_path, work=tmp_path / "work", min_tokens=32, vocab_size=600, train="false", train_iters=1)
    r = run_cli("run", str(config))
    assert r.returncode == 1, r.stderr[-2000:]
    assert "blacklist: 1 shard(s), 2 in, 0 kept, 2 rejected (bad_scheme 1, malformed 1)" in r.stdout
    assert "textmill run: done: 0 documents, 0 tokens" in r.stdout
    assert r.stderr.strip().splitlines()[-1].startswith(
        "textmill: error: the run's corpus holds no documents: blacklist kept none of the 2 records it read "
        "(bad_scheme 1, malformed 1); the rejects and their reasons: textmill inspect ")
