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


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "TEXTMILL_PROGRESS_S": "3600"})
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=3000, help="pages archived")
    parser.add_argument("--files", type=int, default=3, help="archive files they are written into")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each variant, interleaved; the fastest counts")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "archives"
        folder.mkdir()
        pages = write_archives(folder, args.pages, args.files)
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
                [sys.executable, "-m", "textmill.cli", "warc", str(folder), "-o", str(out), "--extract-workers", "1"]))
            out = Path(tmp) / f"datatrove-{number}"
            best["stage: datatrove"] = min(best.get("stage: datatrove", float("inf")), timed(
                [sys.executable, "-c", DATATROVE, str(folder), str(out), str(len(files))]))
            print(f"round {number + 1}: " + ", ".join(f"{k} {v:.2f}s" for k, v in best.items()), flush=True)
        print("\n| what | seconds | pages/s | against |\n|---|---:|---:|---:|")
        for name, seconds in best.items():
            baseline = best["read: warcio" if name.startswith("read") else "stage: datatrove"]
            print(f"| {name} | {seconds:.2f} | {pages / seconds:,.0f} | {baseline / seconds:.2f}x |")


if __name__ == "__main__":
    main()
