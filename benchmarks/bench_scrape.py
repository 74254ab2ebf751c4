"""The scrape at the users' shape: ONE URL list, blacklisted and scraped by the `textmill` commands against a
local web of small article pages, for each list size: wall time, pages/s, and the largest process's RSS.

    python benchmarks/bench_scrape.py [--urls 20000 100000] [--urls-per-shard 200000] [--workers 1]
        [--scrape-up-to N]

The web is textmill's synthetic one (demo.synthweb: 200 article pages of about 3 KB, served by a
threaded HTTP server in this process); the list names its articles again and again with a query that
makes each URL distinct (`/article/7.html?n=12345`), so every URL is fetched and extracted. With
--urls-per-shard above the list's size the whole list is one unit: the scrape task's memory is then set by
its chunk (`[scrape] chunk_urls`), not by the list, and the RSS ratio between sizes shows it (target:
at most 1.2). Lists longer than --scrape-up-to are blacklisted only (the blacklist of a list of a
million URLs, cut into units, without an hour of scraping). Each command runs in a fresh process; its largest
RSS is that of the largest process it waited for (ru_maxrss of its children: the command, the extraction processes).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from textmill.demo import synthweb


def run(*args: str) -> tuple[float, int]:
    """Seconds and the largest RSS (MB) of one textmill command in a fresh process (started from a helper
    process, so that its ru_maxrss is this command's alone)."""
    probe = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
             "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
             "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)")
    out = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "textmill.cli", *args],
                         capture_output=True, text=True, check=True)
    seconds, rss = out.stdout.split()
    return float(seconds), int(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, nargs="+", default=[20_000, 100_000], help="URLs in the one list, per run")
    parser.add_argument("--urls-per-shard", type=int, default=200_000, help="unit size the list is cut into")
    parser.add_argument("--workers", type=int, default=1, help="Luigi workers of the scrape command")
    parser.add_argument("--concurrency", type=int, default=32, help="URLs fetched at once per shard")
    parser.add_argument("--scrape-up-to", type=int, default=None,
                        help="scrape only the lists of at most this many URLs; longer ones are blacklisted only")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}")
    web = synthweb.build_web(seed=11, articles=200, near_duplicates=0, foreign=0, mojibake=0, short=0, faults=False)
    articles = [p for p in web.url_paths if p.startswith("/article/")]
    rows = []
    with synthweb.serve(web) as server, tempfile.TemporaryDirectory() as tmp:
        base = synthweb.base_url(server)
        for count in args.urls:
            root = Path(tmp) / f"list-{count}"
            root.mkdir()
            with open(root / "clean_urls.txt", "w") as f:
                for n in range(count):
                    f.write(f"{base}{articles[n % len(articles)]}?n={n}\n")
            blacklist_s, blacklist_rss = run("blacklist", str(root / "clean_urls.txt"), "-o", str(root / "urls"),
                                 "--urls-per-shard", str(args.urls_per_shard))
            shards = len(list((root / "urls").glob("*.parquet")))
            if args.scrape_up_to is not None and count > args.scrape_up_to:
                rows.append((count, shards, blacklist_s, blacklist_rss, None, None, None))
                continue
            seconds, rss = run("scrape", str(root / "urls"), "-o", str(root / "pages"), "--allow-private-addresses",
                               "--workers", str(args.workers), "--concurrency", str(args.concurrency))
            rows.append((count, shards, blacklist_s, blacklist_rss, seconds, count / seconds / args.workers, rss))

    print(f"\n## One URL list scraped from a local web (--urls-per-shard {args.urls_per_shard:,}, "
          f"--workers {args.workers}, --concurrency {args.concurrency})\n")
    print("| URLs | units | blacklist s | blacklist largest RSS MB | scrape s | pages/s per worker | scrape largest RSS MB "
          "| RSS ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    first_rss = next((row[6] for row in rows if row[6] is not None), None)
    for count, shards, blacklist_s, blacklist_rss, seconds, rate, rss in rows:
        scraped = (f"{seconds:.1f} | {rate:.0f} | {rss} | {rss / first_rss:.2f}" if rss is not None
                   else "not run | | |")
        print(f"| {count:,} | {shards} | {blacklist_s:.1f} | {blacklist_rss} | {scraped} |")


if __name__ == "__main__":
    main()
