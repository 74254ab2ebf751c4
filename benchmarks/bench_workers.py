"""Whether a second worker makes a stage faster: `textmill dedup` and `textmill clean` with --workers 1 and 2 on one
JSON-lines file cut into units, as a user runs them (the command in a fresh process, wall time from start to exit).

    python benchmarks/bench_workers.py [--documents-per-shard 516] [--repeats 3] [--workers 1 2] [--generated N]

The file is tests/data/lambada_test.jsonl (5,153 passages), cut into 10 units by --documents-per-shard 516; or, with
--generated N, N documents of generated English prose (textmill.demo.synthweb, seed 0: units of the default size,
10,000 documents, are 20 times the LAMBADA ones). Clean reads dedup's output. Runs are interleaved (1, 2, 1, 2, ...)
so a busy spell of the shared machine hits every worker count alike, each into a fresh folder; the fastest of
--repeats counts. Prints seconds and the ratio to --workers 1 (below 1.0: the extra worker pays off; the goal is at
most 0.7 with 2).
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DOCUMENTS = Path(__file__).resolve().parent.parent / "tests" / "data" / "lambada_test.jsonl"


def timed(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "textmill.cli", *args], check=True, capture_output=True)
    return time.perf_counter() - started


def generated(count: int, path: Path) -> Path:
    """`count` documents of generated English prose, 3 to 8 paragraphs each, as JSON lines."""
    import json
    import random

    from textmill.demo.synthweb import prose

    rng = random.Random(0)
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            out.write(json.dumps({"id": f"doc-{i}", "text": "\n\n".join(prose(rng, rng.randint(3, 8)))}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents-per-shard", type=int, default=516, help="documents per unit (516: 10 units)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each command and worker count")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts, the first the baseline")
    parser.add_argument("--generated", type=int, metavar="N", help="N generated documents instead of LAMBADA's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        documents = generated(args.generated, root / "generated.jsonl") if args.generated else DOCUMENTS
        print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}; "
              f"{documents.name}, {args.documents_per_shard} documents a unit; fastest of {args.repeats} interleaved "
              "runs\n")
        units = ["--documents-per-shard", str(args.documents_per_shard)]
        subprocess.run([sys.executable, "-m", "textmill.cli", "dedup", str(documents), "-o", str(root / "deduped"),
                        *units], check=True, capture_output=True)
        commands = {"dedup": ["dedup", str(documents)], "clean": ["clean", str(root / "deduped")]}
        print("| stage | workers | seconds | ratio to " + f"{args.workers[0]} worker(s) |\n|---|---:|---:|---:|")
        for stage, command in commands.items():
            best = {w: float("inf") for w in args.workers}
            for repeat in range(args.repeats):
                for workers in args.workers:
                    out = root / f"{stage}-{workers}-{repeat}"
                    best[workers] = min(best[workers], timed([*command, "-o", str(out), "--workers", str(workers), *units]))
                    shutil.rmtree(out)
            for workers, seconds in best.items():
                print(f"| {stage} | {workers} | {seconds:.2f} | {seconds / best[args.workers[0]]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
