"""The hostile documents (support/hostile.py: long whitespace runs of each kind, a 26 MB line, ten million
repeats of a letter, a million combining marks, NUL bytes, lone surrogates, invalid UTF-8 and JSON, ...)
through every corpus stage command and through `textmill run`: each finishes, every record is kept or
rejected with its reason, and the largest process stays within a bound (docs/RELIABILITY.md)."""

import html
import json
import subprocess
import sys

import pyarrow.parquet as pq

from support.files import TEST_DATA
from support.hostile import hostile_lines, hostile_texts
from support.runs import make_run
from textmill.demo import synthweb

# The largest process (MB) of one command, bounds with room over what the development machine measured
# (docs/RELIABILITY.md): 474 for a corpus stage over the 78 MB file (its 26 MB line is over [input]
# max_document_bytes); 857 for tokenize, whose encoder (tiktoken) alone takes 460 MB to merge the file's one
# word of ten million letters; 246 for the run over the pages.
STAGE_BOUND_MB, TOKENIZE_BOUND_MB, RUN_BOUND_MB = 600, 1200, 600

_PEAK = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
         "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr); "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, file=sys.stderr); sys.exit(r.returncode)")


def textmill_with_peak(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    """`textmill ARGS...` and the largest resident memory (MB) of it and every process it started."""
    r = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, "-m", "textmill.cli", *args],
                       capture_output=True, text=True, timeout=900)
    *stderr, peak = r.stderr.splitlines()
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout, "\n".join(stderr)), int(peak)


def test_every_corpus_stage_takes_the_hostile_documents_within_its_memory_bound(tmp_path):
    lines = hostile_lines(1.0)
    source = tmp_path / "hostile.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    peaks = {}
    for stage, extra in [("dedup", []), ("clean", []), ("quality", ["--preset", "fineweb"]),
                         ("shuffle", ["--num-shards", "2"]),
                         ("decontaminate", ["--eval-files", str(TEST_DATA / "lambada_test.jsonl")])]:
        out = tmp_path / stage
        r, peaks[stage] = textmill_with_peak(stage, str(source), "-o", str(out), *extra)
        manifests = [json.loads(p.read_text()) for p in out.glob(".manifests/*.json")]
        counts = [m["counts"] for m in manifests]
        # A stage that kept nothing (fineweb's rules reject every hostile document) says so with exit status 1.
        assert r.returncode == (0 if sum(c["kept"] for c in counts) else 1), (stage, r.stderr[-3000:])
        assert sum(c["input"] for c in counts) == len(lines), (stage, counts)
        rejected = {}
        for m in manifests:
            assert m["counts"]["kept"] + m["counts"]["rejected"] == m["counts"]["input"]
            for reason, n in m["reasons"].items():
                rejected[reason] = rejected.get(reason, 0) + n
        if stage != "shuffle":  # the shuffle's rejects are counted in its manifests, kept by no shard
            rows = pq.read_table(out / ".rejects" / "hostile.parquet").to_pylist()
            assert len(rows) == sum(c["rejected"] for c in counts) and all(row["reason"] for row in rows)
        # The records that are not documents, and the 26 MB line (over [input] max_document_bytes).
        for reason in ("undecodable", "invalid_json", "invalid_unicode", "missing_text", "too_large"):
            assert rejected.get(reason), (stage, reason, rejected)
    r, peaks["tokenize"] = textmill_with_peak(
        "tokenize", "--input", str(source), "--output-prefix", str(tmp_path / "owt"),
        "--vocab-file", str(TEST_DATA / "gpt2-vocab.json"), "--merge-file", str(TEST_DATA / "gpt2-merges.txt"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{len(lines)} documents in" in r.stdout, r.stdout
    assert peaks.pop("tokenize") <= TOKENIZE_BOUND_MB and max(peaks.values()) <= STAGE_BOUND_MB, peaks


def hostile_web() -> synthweb.SyntheticWeb:
    """A small synthetic web without its faulty pages (other tests have them) and a page for each hostile
    text cut to a hundredth (a run's pages are bounded by [scrape] max_bytes), its text in one paragraph."""
    web = synthweb.build_web(seed=3, articles=20, near_duplicates=2, foreign=1, mojibake=1, short=1, faults=False)
    for k, (name, text) in enumerate(hostile_texts(0.01)):
        page = synthweb.html_page(name, [html.escape(text)]).encode("utf-8", "surrogatepass")
        web.pages[f"/hostile/{k}.html"] = synthweb.Page(body=page)
        web.kinds[f"/hostile/{k}.html"] = "hostile"
        web.url_paths.append(f"/hostile/{k}.html")
    return web


def test_a_run_over_hostile_pages_finishes_and_accounts_for_every_page(tmp_path):
    web = hostile_web()
    with synthweb.serve(web) as server:
        config = make_run(tmp_path, (web, server), vocab_size=400)
        r, peak = textmill_with_peak("run", str(config), "--workers", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    work = tmp_path / "work"
    for folder in ("2-scrape", "3-dedup", "4-clean", "6-decontaminate"):
        for path in work.glob(f"{folder}/*/.manifests/*.json"):
            counts = json.loads(path.read_text())["counts"]
            assert counts["kept"] + counts["rejected"] == counts["input"], (path, counts)
    scraped = [json.loads(p.read_text())["counts"] for p in work.glob("2-scrape/*/.manifests/*.json")]
    hostile = [p for p in web.url_paths if p.startswith("/hostile/")]
    assert sum(c["input"] for c in scraped) >= len(hostile)
    assert peak <= RUN_BOUND_MB, peak
