"""Corpus-stage throughput on this machine, each as a ratio against a baseline measured in the same run.

    python benchmarks/bench_pipeline.py [--quick]

1. Scraping: pages/s from a local server that waits `latency` per request, at several concurrency
   levels; baseline: concurrency 1.
2. MinHash: shingles/s on one core of textmill's signature (numpy, the values of datasketch's affine32
   scheme) against datasketch's own `MinHash.update_batch` with the same hash and permutations (what
   textmill called before; datasketch comes with the test extra).
3. Cleanup: documents/s on one core (ftfy + seeded langdetect + token count).
"""

from __future__ import annotations

import argparse
import platform
import random
import tempfile
import time
import zlib
from datetime import date
from pathlib import Path

from datasketch import MinHash

from textmill.demo import synthweb
from textmill.pipeline.blacklist import BlacklistConfig
from textmill.pipeline.clean import CleanConfig, approx_token_count, clean_document
from textmill.pipeline.minhash import MinHasher
from textmill.pipeline.stage_configs import DedupConfig
from textmill.pipeline.shingles import shingles
from textmill.pipeline.scrape import ScrapeConfig, scrape_shard
from textmill.workflows.commands import run_stage


def bench_scrape(pages: int, latency: float, levels: list[int]) -> list[tuple]:
    web = synthweb.build_web(seed=1, articles=pages, near_duplicates=0, foreign=0, mojibake=0, short=0, faults=False)
    rows = []
    with synthweb.serve(web, latency_s=latency) as server, tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "urls.txt").write_text("\n".join(synthweb.base_url(server) + p for p in web.url_paths) + "\n")
        run_stage("blacklist", [tmp / "urls.txt"], tmp / "bl", {"blacklist": BlacklistConfig()})
        for level in levels:
            out = tmp / f"sc{level}"
            started = time.perf_counter()
            m = scrape_shard(tmp / "bl" / "urls.parquet", out / "urls.parquet",
                             ScrapeConfig(concurrency=level, allow_private_addresses=True, extract_workers=2))
            seconds = time.perf_counter() - started
            assert m["counts"]["kept"] == pages
            rows.append((level, pages / seconds))
    return rows


def bench_minhash(docs: int) -> tuple[float, float, int]:
    rng = random.Random(2)
    cfg = DedupConfig()
    texts = [" ".join(synthweb.prose(rng, 6)) for _ in range(docs)]
    grams = [list(shingles(t, cfg.shingle_size, cfg.shingle_unit)) for t in texts]
    n = sum(len(g) for g in grams)
    started = time.perf_counter()
    hasher = MinHasher(cfg)  # as a signature shard runs it: every text added, the signatures taken at once
    for t in texts:
        hasher.add(t)
    hasher.take()
    ours = n / (time.perf_counter() - started)
    started = time.perf_counter()
    for g in grams:  # the baseline: datasketch, a document's shingles in one batch, the same hash and scheme
        m = MinHash(num_perm=cfg.num_perm, seed=cfg.seed, hashfunc=zlib.crc32, scheme="affine32")
        m.update_batch(g)
    loop = n / (time.perf_counter() - started)
    return ours, loop, n


def bench_clean(docs: int) -> float:
    rng = random.Random(3)
    rows = [{"id": str(i), "title": "t", "text": "\n\n".join(synthweb.prose(rng, 5))} for i in range(docs)]
    cfg = CleanConfig()
    clean_document(rows[0], cfg, approx_token_count)  # langdetect loads its profiles once
    started = time.perf_counter()
    for row in rows:
        clean_document(row, cfg, approx_token_count)
    return docs / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller inputs (a smoke run, noisier numbers)")
    args = parser.parse_args()
    pages, docs = (100, 100) if args.quick else (400, 400)

    print(f"# textmill corpus-stage benchmarks, {date.today()}, {platform.machine()}, {platform.python_version()}\n")
    latency = 0.05
    rows = bench_scrape(pages, latency, [1, 4, 16, 64])
    base = rows[0][1]
    print(f"## Scraping: {pages} pages, server latency {latency * 1000:.0f} ms/request, 2 extraction processes\n")
    print("| concurrency | pages/s | vs concurrency 1 |\n|---:|---:|---:|")
    for level, rate in rows:
        print(f"| {level} | {rate:.1f} | {rate / base:.1f}x |")

    ours, loop, n = bench_minhash(docs)
    print(f"\n## MinHash signatures: {docs} docs, {n} word-5-gram shingles, 128 permutations, one core\n")
    print("| method | shingles/s | vs datasketch |\n|---|---:|---:|")
    print(f"| datasketch `MinHash.update_batch` (baseline) | {loop:,.0f} | 1.0x |")
    print(f"| textmill `signature` (numpy) | {ours:,.0f} | {ours / loop:.1f}x |")

    rate = bench_clean(docs)
    print(f"\n## Cleanup: {docs} docs of ~5 paragraphs, one core\n")
    print(f"| stage | docs/s |\n|---|---:|\n| ftfy + seeded langdetect + token count | {rate:.1f} |")


if __name__ == "__main__":
    main()
