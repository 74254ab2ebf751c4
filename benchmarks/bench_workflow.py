"""The Luigi graph at scale: how long building and checking it takes as URL-list files grow, and the
blacklist chain with and without the in-process hand-over of seen URL ids.

    python benchmarks/bench_workflow.py [--files 100 300 1000] [--urls-per-file 50] [--chain 200]

Part 1 writes --files URL-list files (generated URLs, --urls-per-file each) and a run config without
training, then in a fresh process walks the whole graph the way `textmill status` does (every task's key,
requirements and completeness); the ratio is the time per task against the smallest graph's: at or
below 1.0, the work grows no faster than the number of files (fixed costs spread over more tasks).
Part 2 runs the chained blacklist shards of --chain files in one process: each shard reading every
earlier shard's ids (what a shard does when it did not just follow its predecessor here) against each
taking the set the previous shard left.
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


def blacklist_chain(config: Path, hand_over: bool) -> float:
    from textmill.workflows import memos, tasks as t

    n = t.num_url_files(memos.run_config(str(config)))
    started = time.perf_counter()
    for i in range(n):
        if not hand_over:
            memos.KEPT_URL_IDS.clear()
        t.BlacklistShard(str(config), i).run()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, nargs="+", default=[100, 300, 1000], help="URL-list files per graph")
    parser.add_argument("--urls-per-file", type=int, default=50, help="URLs in each file")
    parser.add_argument("--chain", type=int, default=200, help="URL-list files in the blacklist chain of part 2")
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

        print(f"\n## Blacklist chain of {args.chain} files, {args.urls_per_file} URLs each (one process)\n")
        print("| earlier shards' ids | seconds | ratio |")
        print("|---|---:|---:|")
        reread = blacklist_chain(write_run(Path(tmp) / "chain-reread", args.chain, args.urls_per_file), hand_over=False)
        handed = blacklist_chain(write_run(Path(tmp) / "chain-handed", args.chain, args.urls_per_file), hand_over=True)
        print(f"| read from every earlier shard (baseline) | {reread:.2f} | 1.00 |")
        print(f"| handed over by the previous shard | {handed:.2f} | {handed / reread:.2f} |")


if __name__ == "__main__":
    main()
