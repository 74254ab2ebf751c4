"""Pages from web archives: records per second of textmill's WARC stage and of datatrove's WARC reader with the same
extractor (trafilatura), on the same files, in one run; and the two WARC libraries alone (FastWARC, which textmill
reads with, and warcio, which datatrove reads with).

    python benchmarks/bench_warc.py [--pages 3000] [--files 3] [--rounds 2]

The archives: --pages pages of the synthetic web (textmill.demo.synthweb, seed 11: articles of generated prose),
crawled into --files .warc.gz files by textmill.demo.archive (a request and a response record a page, one gzip
member a record, each response with Common Crawl's WARC-Identified-Payload-Type header). Rows:

- read: every record of every file, each response's payload read whole, with FastWARC (ArchiveIterator) and with
  warcio (ArchiveIterator, content_stream()), in this process;
- stage: `textmill warc FILES -o OUT --extract-workers 1` (one Luigi worker, its pages extracted by one extraction
  process under the per-page deadline), and datatrove 0.10's WarcReader followed by its Trafilatura extractor
  (one task per file, one worker, its extractor's per-page deadline; favour_precision and deduplicate off, as
  textmill calls trafilatura, which also asks it for the title) through its LocalPipelineExecutor; each in a fresh
  process, startup included, interleaved round by round, the fastest of --rounds counting.

Records per second counts response records (the pages) per second per worker; the ratios are against warcio and
datatrove, measured in the same run.

With --real, the pages are the repository's real web pages (tests/data/extraction-pages.jsonl.gz: 49 pages of
trafilatura's evaluation set, 2-250 KB), each archived again under new URLs until there are --pages, and one more row
is timed: the minimal loop, warcio's ArchiveIterator and textmill's own trafilatura calls (extract_trafilatura) on
each response's payload decoded as UTF-8, nothing written, in one process: the limit a stage that reads archives with
that extractor can reach. Every stage row then also gives the CPU seconds of its process tree (the extraction
process's included), and its ratio against the loop's.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DATATROVE = """
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.extractors import Trafilatura
from datatrove.pipeline.readers import WarcReader
from datatrove.pipeline.writers import JsonlWriter

folder, out, tasks = sys.argv[1], sys.argv[2], int(sys.argv[3])
LocalPipelineExecutor(pipeline=[WarcReader(folder, glob_pattern="*.warc.gz"),
                                Trafilatura(favour_precision=False, deduplicate=False, timeout=10),
                                JsonlWriter(out + "/docs")],
                      tasks=tasks, workers=1, logging_dir=out + "/logs").run()
"""


def write_archives(folder: Path, pages: int, files: int) -> int:
    """The synthetic web's pages crawled into `files` archives; the number of pages."""
    from textmill.demo import synthweb
    from textmill.demo.archive import write_archive

    web = synthweb.build_web(seed=11, articles=pages, near_duplicates=0, foreign=0, mojibake=0, short=0, faults=False)
    per_file = -(-len(web.url_paths) // files)
    for k in range(files):
        write_archive(web, "http://bench.example", folder / f"crawl-{k}.warc.gz",
                      web.url_paths[k * per_file:(k + 1) * per_file])
    return len(web.url_paths)


MINIMAL_LOOP = """
import sys
from pathlib import Path
from warcio.archiveiterator import ArchiveIterator
from textmill.pipeline.extract import extract_trafilatura

kept = 0
for path in sorted(Path(sys.argv[1]).glob("*.warc.gz")):
    with open(path, "rb") as f:
        for record in ArchiveIterator(f):
            if record.rec_type == "response":
                html = record.content_stream().read().decode("utf-8", "replace")
                kept += bool(extract_trafilatura(record.rec_headers.get_header("WARC-Target-URI"), html)[1])
print(kept)
"""


def write_real_archives(folder: Path, pages: int, files: int) -> int:
    """The repository's real web pages archived again under new URLs until there are `pages`, in `files` archives."""
    import base64
    import gzip
    import json

    from textmill.pipeline.warc_records import request_record, response_record

    with gzip.open(ROOT / "tests" / "data" / "extraction-pages.jsonl.gz", "rt", encoding="utf-8") as f:
        bodies = [base64.b64decode(json.loads(line)["html_base64"]) for line in f]
    per_file = -(-pages // files)
    for k in range(files):
        with open(folder / f"real-{k}.warc.gz", "wb") as out:
            for n in range(k * per_file, min(pages, (k + 1) * per_file)):
                url, body = f"http://bench.example/page-{n}.html", bodies[n % len(bodies)]
                out.write(request_record(url, "2026-11-29T00:00:00Z", "textmill-bench"))
                out.write(response_record(url, "2026-11-29T00:00:00Z", 200,
                                          [("Content-Type", "text/html; charset=utf-8"),
                                           ("Content-Length", str(len(body)))], body))
    return pages


def read_fastwarc(files: list[Path]) -> int:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    responses = 0
    for path in files:
        for record in ArchiveIterator(str(path), fsspec_args=False):
            record.reader.read()
            responses += record.record_type == WarcRecordType.response
    return responses


def read_warcio(files: list[Path]) -> int:
    from warcio.archiveiterator import ArchiveIterator

    responses = 0
    for path in files:
        with open(path, "rb") as f:
            for record in ArchiveIterator(f):
                record.content_stream().read()
                responses += record.rec_type == "response"
    return responses


CPU: dict[str, float] = {}  # the fastest round's CPU seconds of each stage's process tree


def timed(command: list[str], name: str = "") -> float:
    """The command's wall seconds; its process tree's CPU seconds kept in CPU[name] when fewer than before."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "TEXTMILL_PROGRESS_S": "3600"})
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    CPU[name] = min(CPU.get(name, float("inf")), cpu)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=3000, help="pages archived")
    parser.add_argument("--files", type=int, default=3, help="archive files they are written into")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each variant, interleaved; the fastest counts")
    parser.add_argument("--real", action="store_true", help="the repository's real web pages, and the minimal loop")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "archives"
        folder.mkdir()
        pages = (write_real_archives if args.real else write_archives)(folder, args.pages, args.files)
        files = sorted(folder.glob("*.warc.gz"))
        size = sum(p.stat().st_size for p in files)
        print(f"{pages} pages in {len(files)} archives, {size / 2**20:.1f} MiB; {platform.machine()}, "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}", flush=True)
        best: dict[str, float] = {}
        for number in range(args.rounds):
            for name, read in (("read: fastwarc", read_fastwarc), ("read: warcio", read_warcio)):
                started = time.perf_counter()
                assert read(files) == pages
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - started)
            out = Path(tmp) / f"textmill-{number}"
            best["stage: textmill warc"] = min(best.get("stage: textmill warc", float("inf")), timed(
                [sys.executable, "-m", "textmill.cli", "warc", str(folder), "-o", str(out), "--extract-workers", "1"],
                "stage: textmill warc"))
            out = Path(tmp) / f"datatrove-{number}"
            best["stage: datatrove"] = min(best.get("stage: datatrove", float("inf")), timed(
                [sys.executable, "-c", DATATROVE, str(folder), str(out), str(len(files))], "stage: datatrove"))
            if args.real:
                best["stage: minimal loop"] = min(best.get("stage: minimal loop", float("inf")), timed(
                    [sys.executable, "-c", MINIMAL_LOOP, str(folder)], "stage: minimal loop"))
            print(f"round {number + 1}: " + ", ".join(f"{k} {v:.2f}s" for k, v in best.items()), flush=True)
        print("\n| what | seconds | pages/s | against | CPU seconds (process tree) | CPU against the loop |\n"
              "|---|---:|---:|---:|---:|---:|")
        for name, seconds in best.items():
            baseline = best["read: warcio" if name.startswith("read") else "stage: datatrove"]
            cpu = CPU.get(name)
            loop = CPU.get("stage: minimal loop")
            print(f"| {name} | {seconds:.2f} | {pages / seconds:,.0f} | {baseline / seconds:.2f}x | "
                  f"{f'{cpu:.2f}' if cpu else ''} | {f'{loop / cpu:.2f}x' if cpu and loop else ''} |")


if __name__ == "__main__":
    main()
