"""The Luigi graph at scale: how long building and checking it takes as URL-list files grow, and how the
blacklist's time grows with the number of URL-list files.

    python benchmarks/bench_workflow.py [--files 100 300 1000] [--urls-per-file 50] [--chain 200]

Part 1 writes --files URL-list files (generated URLs, --urls-per-file each) and a run config without
training, then in a fresh process walks the whole graph the way `textmill status` does (every task's key,
requirements and completeness); the ratio is the time per task against the smallest graph's: at or
below 1.0, the work grows no faster than the number of files (fixed costs spread over more tasks).
Part 2 runs every blacklist step (a check per file, the duplicates per partition of the URL ids, a shard
per file) in one process for --chain / 4 and --chain files; a ratio per file near 1.0 is linear growth.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = '[run]\nwork_dir = "work"\nurls = ["urls"]\n[train]\nenabled = false\n'

WALK = """
import sys, time
from pathlib import Path
from textmill.workflows.runner import task_states
started = time.perf_counter()  # after the imports
states = task_states(Path(sys.argv[1]))
print(len(states), time.perf_counter() - started)
"""


def write_run(root: Path, files: int, urls_per_file: int) -> Path:
    (root / "urls").mkdir(parents=True)
    for i in range(files):
        lines = "".join(f"https://site{i % 97}.example.org/{i}/article-{j}.html\n" for j in range(urls_per_file))
        (root / "urls" / f"RS_{i:05d}.txt").write_text(lines)
    (root / "run.toml").write_text(CONFIG)
    return root / "run.toml"


def walk(config: Path) -> tuple[int, float]:
    out = subprocess.run([sys.executable, "-c", WALK, str(config)], capture_output=True, text=True, check=True)
    tasks, seconds = out.stdout.split()
    return int(tasks), float(seconds)


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
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}")

    with tempfile.TemporaryDirectory() as tmp:
        print("\n## Building and checking the graph (a fresh process, as `textmill status`)\n")
        print("| URL files | tasks | seconds | ms per task | ratio per task |")
        print("|---:|---:|---:|---:|---:|")
        base = None
        for files in args.files:
            tasks, seconds = walk(write_run(Path(tmp) / f"graph-{files}", files, args.urls_per_file))
            per_task = 1000 * seconds / tasks
            base = base or per_task
            print(f"| {files} | {tasks} | {seconds:.2f} | {per_task:.2f} | {per_task / base:.2f} |")

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
