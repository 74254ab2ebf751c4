"""How long the command line takes to answer: `textmill --help`, every `textmill COMMAND --help`, and
`textmill status` on a finished demo, against starting Python itself (`python -c pass`) in the same run.

    python benchmarks/bench_startup.py [--repeat 5] [--demo-dir DIR]

Each command runs --repeat times as a fresh process; the table shows the median wall time, what it adds
to a bare interpreter, and whether it is under the 0.5 s target. Without --demo-dir the demo is built
first in a temporary folder (about half a minute), so that `status` walks a finished graph.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = ["blacklist", "scrape", "dedup", "clean", "shuffle", "decontaminate", "tokenize", "train-tokenizer",
            "merge-datasets", "train", "evaluate", "export", "import", "checkpoint", "run", "status", "serve",
            "generate", "schedule", "scheduler", "demo"]
TARGET_S = 0.5


def median_seconds(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="runs of each command; the median is shown")
    ap.add_argument("--demo-dir", type=Path, help="a folder where `textmill demo --workdir` has finished "
                    "(default: build one in a temporary folder)")
    args = ap.parse_args()
    textmill = [sys.executable, "-m", "textmill.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        demo = args.demo_dir
        if demo is None:
            demo = Path(tmp) / "demo"
            print(f"building the demo in {demo} ...", file=sys.stderr, flush=True)
            subprocess.run([*textmill, "demo", "--workdir", str(demo)], check=True, stdout=subprocess.DEVNULL)
        rows = [("python -c pass (baseline)", [sys.executable, "-c", "pass"]), ("textmill --help", [*textmill, "--help"])]
        rows += [(f"textmill {c} --help", [*textmill, c, "--help"]) for c in COMMANDS]
        rows.append(("textmill status (finished demo)", [*textmill, "status", str(demo / "run.toml")]))
        results = [(name, median_seconds(argv, args.repeat)) for name, argv in rows]
    base = results[0][1]
    print(f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}; "
          f"median of {args.repeat} runs each\n")
    print("| command | seconds | over `python -c pass` | under 0.5 s |")
    print("|---|---:|---:|:-:|")
    for name, seconds in results:
        print(f"| {name} | {seconds:.3f} | {seconds - base:+.3f} | {'yes' if seconds < TARGET_S else 'NO'} |")


if __name__ == "__main__":
    main()
