"""The Luigi graph at scale: how long building and checking it takes as URL-list files grow, how the
blacklist's time grows with the number of URL-list files, and the graph of ONE big URL list.

    python benchmarks/bench_workflow.py [--files 100 300 1000] [--urls-per-file 50] [--chain 200]
                                        [--big-list 20000000] [--urls-per-shard 10000 50000]

Part 1 writes --files URL-list files (generated URLs, --urls-per-file each) and a run config without
training, then in a fresh process walks the whole graph the way `textmill status` does (every task's key,
requirements and completeness); the ratio is the time per task against the smallest graph's: at or
below 1.0, the work grows no faster than the number of files (fixed costs spread over more tasks). Each
graph is walked again with [tokenize] naming GPT-2's vocabulary (the repository's tests/data copy), as a
run that counts tokens exactly does; the last column is that walk's time over the walk without.
Part 2 runs every blacklist step (a check per file, the duplicates per partition of the URL ids, a shard
per file) in one process for --chain / 4 and --chain files; a ratio per file near 1.0 is linear growth.
Part 3 writes one list of --big-list URLs (Megatron's clean_urls.txt is about 20 million) and, for each
--urls-per-shard, walks the graph in a fresh process twice: first with an empty TEXTMILL_CACHE (the list
is cut: one pass over it), then again (the cut is read from the cache); with the walk's largest RSS. The
ratio is the cached walk's time per task against part 1's smallest graph.
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

CONFIG = '[run]\nwork_dir = "work"\nurls = ["urls"]\n[train]\nenabled = false\n'
TEST_DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
VOCABULARY = f'[tokenize]\nvocab_file = "{TEST_DATA / "gpt2-vocab.json"}"\nmerge_file = "{TEST_DATA / "gpt2-merges.txt"}"\n'

WALK = """
import resource, sys, time
from pathlib import Path
from textmill.workflows.run_records import task_states
started = time.perf_counter()  # after the imports
states = task_states(Path(sys.argv[1]))
print(len(states), time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def write_run(root: Path, files: int, urls_per_file: int) -> Path:
    """URL-list files and two run files over them: run.toml, and vocabulary.toml naming GPT-2's vocabulary."""
    (root / "urls").mkdir(parents=True)
    for i in range(files):
        lines = "".join(f"https://site{i % 97}.example.org/{i}/article-{j}.html\n" for j in range(urls_per_file))
        (root / "urls" / f"RS_{i:05d}.txt").write_text(lines)
    (root / "run.toml").write_text(CONFIG)
    (root / "vocabulary.toml").write_text(CONFIG + VOCABULARY)
    return root / "run.toml"


def walk(config: Path, env: dict | None = None) -> tuple[int, float, int]:
    """Tasks, seconds and largest RSS (MB) of a walk of the graph in a fresh process."""
    out = subprocess.run([sys.executable, "-c", WALK, str(config)], capture_output=True, text=True, check=True,
                         env=env)
    tasks, seconds, rss = out.stdout.split()
    return int(tasks), float(seconds), int(rss)


def write_big_run(root: Path, urls: int, urls_per_shard: int) -> Path:
    """One URL list of `urls` lines (written once per root) and a run file cutting it `urls_per_shard` a unit."""
    big = root / "urls" / "clean_urls.txt"
    if not big.exists():
        big.parent.mkdir(parents=True)
        with open(big, "w") as f:
            for start in range(0, urls, 100_000):
                f.write("".join(f"https://site{i % 9973}.example.org/{i // 9973}/article-{i}.html\n"
                                for i in range(start, min(start + 100_000, urls))))
    config = root / f"run-{urls_per_shard}.toml"
    config.write_text(CONFIG.replace('[train]', f'[blacklist]\nurls_per_shard = {urls_per_shard}\n[train]'))
    return config


def blacklist_steps(config: Path) -> float:
    """The blacklist of every URL file in one process: each check, each partition's duplicates, each shard."""
    from textmill import workflows as t
    from textmill.workflows.framework import num_shards
    from textmill.workflows.memos import run_config

    settings = run_config(str(config))
    n = num_shards(settings)
    started = time.perf_counter()
    for task in ([t.BlacklistCheck(str(config), i) for i in range(n)]
                 + [t.BlacklistDuplicates(str(config), p) for p in range(settings.blacklist.duplicate_partitions)]
                 + [t.BlacklistShard(str(config), i) for i in range(n)]):
        list(task.run())  # run() is a generator (it may yield requirements known late): drain it
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, nargs="+", default=[100, 300, 1000], help="URL-list files per graph")
    parser.add_argument("--urls-per-file", type=int, default=50, help="URLs in each file")
    parser.add_argument("--chain", type=int, default=200, help="URL-list files of the larger blacklist of part 2")
    parser.add_argument("--big-list", type=int, default=20_000_000, help="URLs in the one list of part 3")
    parser.add_argument("--urls-per-shard", type=int, nargs="+", default=[10_000, 50_000],
                        help="unit sizes part 3 cuts the list into")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}")

    with tempfile.TemporaryDirectory() as tmp:
        print("\n## Building and checking the graph (a fresh process, as `textmill status`)\n")
        print("| URL files | tasks | seconds | ms per task | ratio per task | seconds, vocabulary named | with / without |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        base = None
        for files in args.files:
            config = write_run(Path(tmp) / f"graph-{files}", files, args.urls_per_file)
            tasks, seconds, _ = walk(config)
            _, named, _ = walk(config.with_name("vocabulary.toml"))
            per_task = 1000 * seconds / tasks
            base = base or per_task
            print(f"| {files} | {tasks} | {seconds:.2f} | {per_task:.2f} | {per_task / base:.2f} | {named:.2f} | "
                  f"{named / seconds:.2f} |")

        print(f"\n## One URL list of {args.big_list:,} URLs (a fresh process each, as `textmill status`)\n")
        print("| urls_per_shard | units | tasks | seconds, list not yet cut | seconds, cut cached | largest RSS MB "
              "| ms per task | ratio per task |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for per_shard in args.urls_per_shard:
            config = write_big_run(Path(tmp) / "big", args.big_list, per_shard)
            env = {**os.environ, "TEXTMILL_CACHE": str(Path(tmp) / f"cache-{per_shard}")}
            tasks, cold, _ = walk(config, env)
            tasks, warm, rss = walk(config, env)
            units = -(-args.big_list // per_shard)
            print(f"| {per_shard:,} | {units:,} | {tasks:,} | {cold:.2f} | {warm:.2f} | {rss} | "
                  f"{1000 * warm / tasks:.2f} | {1000 * warm / tasks / base:.2f} |")

        print(f"\n## Blacklist of URL-list files, {args.urls_per_file} URLs each (one process, every step)\n")
        print("| URL files | seconds | ms per file | ratio per file |")
        print("|---:|---:|---:|---:|")
        base = None
        for files in (args.chain // 4, args.chain):
            seconds = blacklist_steps(write_run(Path(tmp) / f"blacklist-{files}", files, args.urls_per_file))
            base = base or seconds / files
            print(f"| {files} | {seconds:.2f} | {1000 * seconds / files:.1f} | {seconds / files / base:.2f} |")


if __name__ == "__main__":
    main()
