"""Memory on hostile input (issue 62): the peak resident memory of a stage given a small file that declares or
decompresses to gigabytes, beside the same stage on an ordinary file of its kind in the same run.

    python benchmarks/bench_bounds.py [--gib 4]

Each case runs in a Python of its own, whose peak (VmHWM) is read at its end:
- reddit-urls of a .zst holding one line of GIB GiB (rejected too_large), beside a month of ordinary submissions;
- warc of an archive whose last gzip member is a record of GIB GiB of zeros (too_large), beside an archive of
  ordinary pages;
- an archive lookup whose capture is one gzip member of 1 GiB of zeros (too_large), beside an ordinary capture.
Prints a markdown table: the ordinary file's peak, the hostile file's, their ratio, and whether the hostile one
stayed under 500 MB.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOUND_MB = 500


def reddit_case(folder: Path, hostile: bool, gib: int) -> tuple[str, list[str]]:
    from support.bombs import zst_with_a_huge_line
    from textmill.demo.reddit import submissions, write_dump

    if hostile:
        dump = zst_with_a_huge_line(folder / "RS_2011-03.zst", gib)
    else:
        urls = [f"http://site{i % 50}.example/{i}" for i in range(20_000)]
        dump = write_dump(submissions(urls, ("2011-01", "2011-02"), 1)["2011-02"], folder / "RS_2011-02.zst")
    code = ("import sys; from pathlib import Path; from textmill.pipeline.reddit import reddit_links; "
            "from textmill.pipeline.stage_configs import RedditConfig; "
            "result = reddit_links(Path(sys.argv[1]), Path(sys.argv[2]), RedditConfig())['reasons']")
    return code, [str(dump), str(folder / "out" / f"{dump.stem}.jsonl")]


def warc_case(folder: Path, hostile: bool, gib: int) -> tuple[str, list[str]]:
    from support.bombs import gzip_member_of_zeros, response_of_zeros
    from textmill.demo import synthweb
    from textmill.demo.archive import CRAWLED_AT, write_archive

    web = synthweb.build_web(seed=3, articles=60, near_duplicates=0, foreign=0, mojibake=0, short=0)
    archive = write_archive(web, "http://127.0.0.1:8000", folder / f"crawl-{int(hostile)}.warc.gz")
    if hostile:
        head, tail = response_of_zeros("http://127.0.0.1:8000/zeros.html", CRAWLED_AT, gib)
        with open(archive, "ab") as f:
            gzip_member_of_zeros(f, head, gib, tail)
    code = ("import sys; from pathlib import Path; from textmill.pipeline.units import warc_units; "
            "from textmill.pipeline.warc import warc_shard; from textmill.pipeline.stage_configs import ScrapeConfig; "
            "[unit] = warc_units(Path(sys.argv[1]), 100000); "
            "result = warc_shard(unit, Path(sys.argv[2]), ScrapeConfig(extract_workers=0))['reasons']")
    return code, [str(archive), str(folder / "out" / "crawl.parquet")]


def capture_case(folder: Path, hostile: bool, gib: int) -> tuple[str, list[str]]:
    from support.bombs import gzip_member_of_zeros, response_of_zeros
    from textmill.demo import synthweb
    from textmill.demo.archive import write_archive
    from textmill.pipeline.archive import cdxj_lines

    web = synthweb.build_web(seed=3, articles=6, near_duplicates=0, foreign=0, mojibake=0, short=0)
    (folder / "archive").mkdir(exist_ok=True)
    lines = cdxj_lines(write_archive(web, "http://127.0.0.1:8000", folder / "archive" / "a.warc.gz"), "a.warc.gz")
    key, timestamp, entry = next(line for line in lines if '"status": "200"' in line).split(" ", 2)
    entry = json.loads(entry)
    if hostile:
        head, tail = response_of_zeros(entry["url"], "2024-01-01T00:00:00Z", 1)
        with open(folder / "archive" / "zeros.warc.gz", "wb") as f:
            gzip_member_of_zeros(f, head, 1, tail)
        entry |= {"filename": "zeros.warc.gz", "offset": "0",
                  "length": str((folder / "archive" / "zeros.warc.gz").stat().st_size)}
    (folder / f"index-{int(hostile)}.cdxj").write_text(f"{key} {timestamp} {json.dumps(entry)}\n")
    code = ("import asyncio, sys; from textmill.pipeline.archive import Archive; "
            "from textmill.pipeline.stage_configs import ScrapeConfig; "
            "from textmill.pipeline.blacklist import normalize_url; "
            "cfg = ScrapeConfig(archive_index=sys.argv[2], archive_prefix=sys.argv[3]); "
            "got = asyncio.run(Archive(cfg, None).page(normalize_url(sys.argv[1])[0]))[0]; "
            "result = got.reason or f'{len(got.body)} bytes read'")
    return code, [entry["url"], str(folder / f"index-{int(hostile)}.cdxj"), str(folder / "archive")]


CASES = {"reddit-urls: a .zst holding one line of {gib} GiB": reddit_case,
         "warc: a last record of {gib} GiB of zeros": warc_case,
         "archive lookup: a capture of 1 GiB of zeros": capture_case}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=int, default=4, help="size of the hostile line and record, in GiB")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from support.memory import run_measured

    print(f"| case | ordinary file: peak MB | hostile file: peak MB | ratio | hostile result | under {BOUND_MB} MB | s |")
    print("|---|---:|---:|---:|---|---|---:|")
    for name, case in CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            peaks, results, started = [], [], time.perf_counter()
            for hostile in (False, True):
                folder = Path(tmp) / ("hostile" if hostile else "ordinary")
                folder.mkdir()
                code, argv = case(folder, hostile, args.gib)
                result, peak = run_measured(code, *argv)
                peaks.append(peak)
                results.append(result)
            print(f"| {name.format(gib=args.gib)} | {peaks[0]} | {peaks[1]} | {peaks[1] / peaks[0]:.2f} | {results[1]} | "
                  f"{'yes' if peaks[1] < BOUND_MB else 'NO'} | {time.perf_counter() - started:.0f} |", flush=True)


if __name__ == "__main__":
    main()
