"""A corpus that grows: what the next day's run costs. Day 1 is a run of N web archives; day 2 adds archives of new
pages (1%, 5% and 20% more) and runs again, in each form of the corpus ([run] corpus_form: one shuffled and merged
corpus, or parts). Per stage: the seconds its tasks ran on each day (the tasks' own time records, one worker: a task
at a time), the tasks that ran, and day 2 / day 1; and the CPU seconds of the whole run (the process and its workers).

    python benchmarks/bench_incremental.py [--archives 100] [--pages 750] [--shard-mb 2] [--growth 1 5 20]
        [--forms single parts] [--per-unit N]

Each archive holds `--pages` generated articles of its own (textmill.demo.synthweb, a seed per archive) and is one
unit of the run (`[warc] responses_per_shard` = pages). GPT-2's vocabulary is named (no BPE trained), training is
off, and the shuffle's shards follow the corpus's size (`[shuffle] target_shard_mb`; in the parts form, each part's).
The source stage (reading the archives) is shown apart: its promise, only the new units read, is kept already; the
ratio that matters is of the work after it. Day 1 is run once per form; each day 2 runs on a copy of its folder.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUN = """
[run]
work_dir = "work"
warcs = ["warcs"]
corpus_form = "{form}"
[warc]
responses_per_shard = {per_unit}
[shuffle]
target_shard_mb = {shard_mb}
[tokenize]
vocab_file = "{data}/gpt2-vocab.json"
merge_file = "{data}/gpt2-merges.txt"
[train]
enabled = false
"""


def write_archives(folder: Path, first: int, count: int, pages: int) -> None:
    from textmill.demo import synthweb
    from textmill.demo.archive import write_archive

    for number in range(first, first + count):
        web = synthweb.build_web(seed=1000 + number, articles=pages, near_duplicates=0, foreign=0, mojibake=0,
                                 short=0, faults=False)
        write_archive(web, f"http://site{number}.example", folder / f"crawl-{number:05d}.warc.gz")


def task_times(work: Path) -> dict[Path, tuple[int, float]]:
    """Each task's time record: (its modification time, its seconds)."""
    return {p: (p.stat().st_mtime_ns, json.loads(p.read_text())["seconds"])
            for p in (work / ".textmill" / "times").glob("*.json")}


def stage_of(record: Path) -> str:
    """The stage folder of the task whose time record this is, without its number (4-clean: clean)."""
    import luigi.task_register

    import textmill.workflows  # noqa: F401  (registers every task class with Luigi)

    task = luigi.task_register.Register.get_task_cls(record.stem.split("-", 1)[0])
    return task.stage.split("-", 1)[-1]


def run_day(config: Path, before: dict) -> tuple[dict[str, float], dict[str, int], float]:
    """Run; the seconds and tasks per stage of the tasks that ran, and the process's CPU seconds."""
    from textmill.workflows.runner import run_workflow

    started = cpu_seconds()
    ok, *_ = run_workflow(config, workers=1)
    if not ok:
        sys.exit(f"bench_incremental: the run of {config} did not finish")
    seconds, tasks = defaultdict(float), defaultdict(int)
    for path, (mtime, spent) in task_times(config.parent / "work").items():
        if before.get(path, (None,))[0] != mtime:
            seconds[stage_of(path)] += spent
            tasks[stage_of(path)] += 1
    return seconds, tasks, cpu_seconds() - started


def cpu_seconds() -> float:
    """CPU time of this process and of the worker processes it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--archives", type=int, default=100, help="archives on day 1, each one unit")
    p.add_argument("--pages", type=int, default=750, help="articles per archive (a unit's documents)")
    p.add_argument("--per-unit", type=int, default=0, help="[warc] responses_per_shard: pages per unit of work (0: an "
                   "archive a unit)")
    p.add_argument("--growth", type=int, nargs="+", default=[1, 5, 20], help="archives added on day 2, in percent")
    p.add_argument("--forms", nargs="+", default=["single", "parts"], choices=["single", "parts"],
                   help="[run] corpus_form of the runs: each growth is measured in each form")
    p.add_argument("--shard-mb", type=float, default=2.0, help="[shuffle] target_shard_mb: the shuffle's shards (and "
                   "token files) follow the corpus's size, or in the parts form each part's")
    args = p.parse_args()
    print(f"# bench_incremental: {platform.node()}, {platform.processor() or platform.machine()}; day 1: "
          f"{args.archives} archives of {args.pages} pages; one worker")
    summary = []
    for form in args.forms:
        first = Path(tempfile.mkdtemp(prefix=f"bench-incremental-{form}-"))
        try:
            write_archives(first / "warcs", 0, args.archives, args.pages)
            (first / "run.toml").write_text(RUN.format(per_unit=args.per_unit or args.pages, form=form, shard_mb=args.shard_mb,
                                                       data=ROOT / "tests" / "data"))
            started = time.perf_counter()
            day1, tasks1, cpu1 = run_day(first / "run.toml", {})
            wall1 = time.perf_counter() - started
            for growth in args.growth:  # each day 2 on a copy of day 1's folder
                added = max(1, round(args.archives * growth / 100))
                root = Path(tempfile.mkdtemp(prefix=f"bench-incremental-{form}-{growth}-"))
                try:
                    shutil.copytree(first, root, dirs_exist_ok=True)
                    write_archives(root / "warcs", args.archives, added, args.pages)
                    before = task_times(root / "work")
                    started = time.perf_counter()
                    day2, tasks2, cpu2 = run_day(root / "run.toml", before)
                    wall2 = time.perf_counter() - started
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                print(f"\n## {form} form, day 2 adds {added} archive(s) ({added / args.archives:.0%}); wall {wall1:.1f} s, "
                      f"then {wall2:.1f} s; the process's CPU {cpu1:.1f} s, then {cpu2:.1f} s\n")
                summary.append((form, added, *stage_table(day1, tasks1, day2, tasks2), cpu1, cpu2))
        finally:
            shutil.rmtree(first, ignore_errors=True)
    print("\n## Summary: the tasks' seconds after the source stage, and the whole run's CPU seconds\n")
    print("| form | day 2 adds | after the source stage: day 1, day 2 (ratio) | run CPU: day 1, day 2 (ratio) |\n"
          "|---|---:|---:|---:|")
    for form, added, after1, after2, cpu1, cpu2 in summary:
        print(f"| {form} | {added / args.archives:.0%} | {after1:.2f} s, {after2:.2f} s ({after2 / after1:.2f}) | "
              f"{cpu1:.1f} s, {cpu2:.1f} s ({cpu2 / cpu1:.2f}) |")


def stage_table(day1: dict, tasks1: dict, day2: dict, tasks2: dict) -> tuple[float, float]:
    """Print the stages' seconds and tasks on each day; the seconds of both days after the source stage."""
    print("| stage | day 1: tasks, seconds | day 2: tasks, seconds | day 2 / day 1 |\n|---|---:|---:|---:|")
    after_source = [0.0, 0.0]
    for stage in sorted(set(day1) | set(day2), key=lambda s: -day1.get(s, 0.0)):
        ratio = day2.get(stage, 0.0) / day1[stage] if day1.get(stage) else float("nan")
        print(f"| {stage} | {tasks1.get(stage, 0)}, {day1.get(stage, 0.0):.2f} | {tasks2.get(stage, 0)}, "
              f"{day2.get(stage, 0.0):.2f} | {ratio:.2f} |")
        if stage != "warc":
            after_source[0] += day1.get(stage, 0.0)
            after_source[1] += day2.get(stage, 0.0)
    print(f"| all after the source stage | | | {after_source[1] / after_source[0]:.2f} |")
    return after_source[0], after_source[1]


if __name__ == "__main__":
    main()
