"""The corpus stages at scale: dedup, shuffle, decontaminate, BPE training (with --bpe) and tokenize of a
synthetic corpus, run through the Luigi graph as `textmill run` runs them, with 1 and 2 workers.

The input is what users bring: ONE list of `--documents` URLs, which the run cuts into units of `--shard-documents`
([blacklist] urls_per_shard). The corpus is written directly as each unit's scrape output shard (no fetching):
documents of about 3 KB of Zipf-distributed English words (GPT-2's vocabulary), 5% of them lightly edited copies of
earlier ones (near-duplicates for dedup), 0.5% holding a LAMBADA passage (for decontamination against
tests/data/lambada_test.jsonl). The stages are built one after the other (so no stage's wall time holds another's),
every task in a process of its own (Luigi's force_multiprocessing), which records its peak resident set (ru_maxrss of
the task's process, a fork of the scheduling process, so it includes the imports that process holds: read the ratios
between sizes; the corpus is generated in a process of its own, so that its documents are not counted too).

    python benchmarks/bench_scale.py --documents 20000 100000 [--shard-documents 10000] [--bpe]
        [--start-at shuffle] [--stop-after STAGE]

Prints, per corpus size and stage: wall time with 1 and 2 workers and their ratio, the largest peak RSS
of any of the stage's tasks, documents/s; then each stage's time extrapolated to 8M and 100M documents
with 64 workers (from the largest corpus's task times: per-shard tasks shared among the workers,
once-per-stage tasks serial, both linear in the documents but the bounded BPE sample; assumes each
worker as fast as one core here, enough shards to keep them busy, and storage and scheduler never the
bottleneck), with the scrape beside them at given rates (pages/s per worker, the network never the
limit: measured rates against a local server); then the ratio of each stage's largest task RSS between the
largest and the smallest corpus.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LAMBADA = ROOT / "tests" / "data" / "lambada_test.jsonl"
CONFIG = """\
[run]
work_dir = "work"
urls = ["urls"]
[blacklist]
urls_per_shard = {per_shard}
[clean]
min_tokens = 16
[shuffle]
num_shards = {shards}
[decontaminate]
eval_files = ["{lambada}"]
[tokenize]
{tokenizer}
[train]
enabled = false
"""


def write_corpus(root: Path, documents: int, per_shard: int, bpe: bool, start_at: str = "dedup") -> Path:
    """One URL list, the run file, and the output shards of the stage before `start_at` (scrape's, or
    clean's to start at the shuffle) of each unit the run cuts the list into, holding the synthetic
    documents."""
    from textmill.pipeline.shards import DOC_SCHEMA, ShardOutput
    from textmill.workflows import CleanShard, ScrapeShard

    written_by = {"dedup": ScrapeShard, "shuffle": CleanShard}[start_at]

    shards = -(-documents // per_shard)
    (root / "urls").mkdir(parents=True)
    with open(root / "urls" / "clean_urls.txt", "w") as f:
        f.writelines(f"https://example.org/{i // per_shard}/{i}\n" for i in range(documents))
    tokenizer = ('vocab_size = 8192' if bpe else
                 f'vocab_file = "{ROOT}/tests/data/gpt2-vocab.json"\nmerge_file = "{ROOT}/tests/data/gpt2-merges.txt"')
    config = root / "run.toml"
    # Shuffled shards of about 5,000 documents whatever the unit: the output's size is the user's choice
    # (the gather holds one output shard), not a consequence of how the input was cut.
    config.write_text(CONFIG.format(shards=-(-documents // 5000), per_shard=per_shard, lambada=LAMBADA, tokenizer=tokenizer))
    rng = np.random.default_rng(0)
    vocab = json.loads((ROOT / "tests" / "data" / "gpt2-vocab.json").read_text())  # in id order: common first
    words = np.array([w[1:] for w in vocab if w.startswith("Ġ") and w[1:].isalpha() and w[1:].islower()][:20000])
    cdf = np.cumsum(1.0 / np.arange(1, len(words) + 1))  # Zipf
    cdf /= cdf[-1]
    passages = [json.loads(line)["text"] for line in LAMBADA.read_text().splitlines()]
    made: list[str] = []
    for s in range(shards):
        rows = []
        for i in range(s * per_shard, min((s + 1) * per_shard, documents)):
            if made and rng.random() < 0.05:  # a near-duplicate of an earlier document: a few words changed
                text = made[int(rng.integers(len(made)))].split(" ")
                for j in rng.integers(len(text), size=len(text) // 100 + 1):
                    text[j] = str(words[np.searchsorted(cdf, rng.random())])
                text = " ".join(text)
            else:
                text = " ".join(words[np.searchsorted(cdf, rng.random(int(rng.integers(300, 700))))])
                if rng.random() < 0.005:
                    text = text + " " + passages[int(rng.integers(len(passages)))] + " " + text[:500]
            if len(made) < 20000:
                made.append(text)
            rows.append({"id": f"{s}-{i}", "url": f"https://example.org/{s}/{i}", "text": text})
        output = written_by(str(config), s).output().shard
        with ShardOutput(written_by.stage, output, DOC_SCHEMA, [], {}) as stage:
            for row in rows:
                stage.keep(row)
            stage.finish(len(rows))
    return config


def record_task(task, *_args) -> None:
    """Runs in the task's own process when it succeeds: its wall time and peak resident set."""
    started = getattr(task, "_bench_started", None)
    if started is None:
        return
    line = {"family": task.get_task_family(), "start": started, "end": time.time(),
            "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    with open(os.environ["BENCH_TASK_LOG"], "a") as f:
        f.write(json.dumps(line) + "\n")


def mark_start(task) -> None:
    task._bench_started = time.time()


def stage_targets(config: Path, bpe: bool) -> list[tuple[str, list]]:
    """The stages in graph order, each as the tasks that finish it."""
    from textmill import workflows as t
    from textmill.workflows.framework import num_shards
    from textmill.workflows.memos import run_config

    n = num_shards(run_config(str(config)))
    stages = [("dedup", [t.DedupShard(str(config), i) for i in range(n)]),
              ("clean", [t.CleanShard(str(config), i) for i in range(n)]),
              ("shuffle", [t.Shuffle(str(config))]), ("decontaminate", [t.Decontaminate(str(config))])]
    return stages + ([("bpe", [t.TrainTokenizer(str(config))])] if bpe else []) + [("tokenize", [t.MergeDataset(str(config))])]


def build(config: Path, workers: int, log: Path, bpe: bool, stop_after: str | None = None,
          start_at: str = "dedup") -> dict[str, dict]:
    """Each stage built in turn (so no stage's time holds another's): its wall time, its tasks' largest
    peak RSS and how many tasks it ran."""
    import luigi

    from textmill.workflows.framework import RunTask
    from textmill.workflows.runner import Schedulers, configure_luigi

    configure_luigi()
    luigi.configuration.get_config().set("worker", "force_multiprocessing", "true")
    RunTask.event_handler(luigi.Event.START)(mark_start)
    RunTask.event_handler(luigi.Event.SUCCESS)(record_task)
    os.environ["BENCH_TASK_LOG"] = str(log)
    result = {}
    stages = stage_targets(config, bpe)
    stages = stages[[name for name, _ in stages].index(start_at):]
    if stop_after:
        stages = stages[:[name for name, _ in stages].index(stop_after) + 1]
    for stage, targets in stages:
        log.write_text("")
        started = time.perf_counter()
        if not luigi.build(targets, workers=workers, local_scheduler=True, log_level="WARNING",
                           worker_scheduler_factory=Schedulers()):
            raise SystemExit(f"{stage} of {config} failed")
        records = [json.loads(line) for line in log.read_text().splitlines()]
        families: dict[str, list[float]] = {}
        for r in records:
            families.setdefault(r["family"], []).append(r["end"] - r["start"])
        peak = max(records, key=lambda r: r["rss"])
        result[stage] = {"wall": time.perf_counter() - started, "rss": peak["rss"], "peak_task": peak["family"],
                         "tasks": len(records),
                         # task-seconds of the task kinds that run once per shard (or band, partition), and of
                         # those that run once per stage (a clustering, a selection, the BPE, the merge)
                         "parallel_s": sum(sum(t) for t in families.values() if len(t) > 1),
                         "serial_s": sum(sum(t) for t in families.values() if len(t) == 1)}
    return result


def extrapolate(documents: int, result: dict[str, dict], sizes: list[int], workers: int,
                scrape_rates: list[float], urls_per_document: float) -> None:
    """Each stage's wall time at `sizes` documents with `workers` workers, from this run's task times:
    the per-shard work divided among the workers, the once-per-stage work serial; both linear in the
    documents, but the BPE, whose sample is bounded. Then the scrape at each given rate (pages/s per
    worker, measured by bench_scrape.py and bench_extract.py), fetching `urls_per_document` URLs per
    document kept."""
    print(f"\nExtrapolated from {documents:,} documents to {workers} workers (hours):\n")
    print("| stage | per-shard task-s | once-per-stage s | " + " | ".join(f"{n:,} documents" for n in sizes) + " |")
    print("|---|---:|---:|" + "---:|" * len(sizes))
    totals = [0.0] * len(sizes)
    for stage, r in result.items():
        hours = []
        for k, n in enumerate(sizes):
            scale = n / documents
            serial = r["serial_s"] if stage == "bpe" else r["serial_s"] * scale
            hours.append((r["parallel_s"] * scale / workers + serial) / 3600)
            totals[k] += hours[-1]
        print(f"| {stage} | {r['parallel_s']:,.0f} | {r['serial_s']:,.0f} | " + " | ".join(f"{h:.2f}" for h in hours) + " |")
    print("| all of the above | | | " + " | ".join(f"{h:.2f}" for h in totals) + " |")
    for rate in scrape_rates:
        hours = [n * urls_per_document / rate / workers / 3600 for n in sizes]
        print(f"| scrape at {rate:g} pages/s per worker, {urls_per_document:g} URLs per document | | | "
              + " | ".join(f"{h:.2f}" for h in hours) + " |")
        print("| all, with that scrape | | | " + " | ".join(f"{h + t:.2f}" for h, t in zip(hours, totals, strict=True)) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--documents", type=int, nargs="+", default=[20000, 100000], help="corpus sizes to run")
    ap.add_argument("--shard-documents", type=int, default=10000,
                    help="documents per unit: the run cuts the one URL list into units of this many URLs")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="Luigi worker counts to compare")
    ap.add_argument("--bpe", action="store_true", help="train a BPE on the corpus (no vocabulary given)")
    ap.add_argument("--stop-after", choices=["dedup", "clean", "shuffle", "decontaminate", "bpe", "tokenize"],
                    help="build the stages up to this one only")
    ap.add_argument("--start-at", choices=["dedup", "shuffle"], default="dedup",
                    help="the first stage built: shuffle writes the corpus as the clean stage's output, to measure "
                    "the stages after it without dedup's and cleanup's time")
    ap.add_argument("--scrape-rates", type=float, nargs="*", default=[341, 20],
                    help="pages/s per worker of the scrape for the extrapolation (341: small local pages, "
                    "bench_scrape.py; 20: trafilatura on real pages, one core, bench_extract.py)")
    ap.add_argument("--urls-per-document", type=float, default=2.5,
                    help="URLs fetched per document kept (OpenWebText's recipe: about 20 million URLs for 8 million "
                    "documents)")
    args = ap.parse_args()
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; {args.shard_documents} documents a shard\n")
    print("| documents | stage | tasks | " + " | ".join(f"{w} worker{'s' * (w > 1)} (s)" for w in args.workers)
          + f" | ratio {args.workers[-1]}:{args.workers[0]} | largest task RSS (MiB), its task"
          + f" | documents/s ({args.workers[-1]} workers) |")
    print("|---:|---|---:|" + "---:|" * len(args.workers) + "---:|---:|---:|")
    largest: dict[int, dict[str, int]] = {}
    for documents in args.documents:
        results = {}
        for workers in args.workers:
            with tempfile.TemporaryDirectory() as tmp:
                # In a process of its own: every task is a fork of this one, whose peak RSS counts what it holds.
                with multiprocessing.get_context("spawn").Pool(1) as pool:
                    config = pool.apply(write_corpus, (Path(tmp), documents, args.shard_documents, args.bpe,
                                                       args.start_at))
                log = Path(tmp) / "tasks.jsonl"
                results[workers] = build(config, workers, log, args.bpe, args.stop_after, args.start_at)
                shutil.rmtree(Path(tmp) / "work")
        first = results[args.workers[0]]
        largest[documents] = {stage: max(r[stage]["rss"] for r in results.values()) for stage in first}
        peaks = {stage: max((r[stage] for r in results.values()), key=lambda x: x["rss"])["peak_task"] for stage in first}
        for stage in first:
            walls = [results[w][stage]["wall"] for w in args.workers]
            print(f"| {documents:,} | {stage} | {first[stage]['tasks']} | " + " | ".join(f"{w:.1f}" for w in walls)
                  + f" | {walls[-1] / walls[0]:.2f} | {largest[documents][stage] / 2**20:,.0f}, {peaks[stage]} | "
                  f"{documents / walls[-1]:,.0f} |", flush=True)
    extrapolate(args.documents[-1], results[args.workers[0]], [8_000_000, 100_000_000], 64, args.scrape_rates,
                args.urls_per_document)
    if len(args.documents) > 1:
        small, big = args.documents[0], args.documents[-1]
        print(f"\nLargest task RSS, {big:,} documents over {small:,}:\n")
        print("| stage | ratio |\n|---|---:|")
        for stage, rss in largest[big].items():
            print(f"| {stage} | {rss / largest[small][stage]:.2f} |")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
