"""The corpus stages' per-document work: this checkout against an earlier textmill (--against REV) and beside
datatrove, on one generated corpus, with the verdicts compared and a profile split.

    python benchmarks/bench_chain.py [--documents 5000] [--files 10] [--rounds 3] [--against REV] [--workers 1 2]
                                     [--stages quality decontaminate dedup clean chain] [--preset gopher]
                                     [--real-texts] [--no-datatrove] [--profile]

The corpus: --documents generated documents (textmill.demo.synthweb.corpus_documents, seed 1: articles of
real-ish prose, near-duplicate and case-changed copies, boilerplate-repeating and list pages, short notes,
French, German and Spanish pages, LAMBADA passages planted in some articles), with --real-texts the repository's
861 real web texts spread through them, in --files JSON-lines files. Each
stage runs as `textmill <stage>` runs it (workflows.commands.run_stage, Luigi included) on that corpus alone,
in a fresh process per variant and round; variants are interleaved (REV, this checkout, datatrove, then
again) so a busy spell of the shared machine hits each alike; the fastest of --rounds counts. REV runs from a
git worktree of that revision with this script. Settings: quality --preset (gopher; c4 and fineweb have no datatrove
cell); decontaminate against
tests/data/lambada_test.jsonl; dedup and clean their defaults. `chain`: dedup, clean, quality and `textmill
tokenize` (GPT-2's vocabulary), each on the one before's kept documents. Each stage's wall seconds and the CPU seconds
of its process tree (the process's and its ended children's: getrusage) are reported.

datatrove 0.10 (the test extra) runs the same Gopher filters (GopherRepetitionFilter, GopherQualityFilter) and
its MinHash deduplication (signatures, buckets, clusters, filter: 14 buckets of 8 hashes, its defaults; sha1
shingle hashes, as its default xxhash fails with xxhash 4: "Strings must be encoded before hashing") on the
same files with as many tasks as workers; its chain is that deduplication, then FTFYFormatter, the Gopher filters
and its DocumentTokenizer with GPT-2's vocabulary in one pipeline. Its decontamination (NGramsDecontFilter) and
language filter fetch their data from the Hugging Face hub, which this benchmark does not reach: those cells stay
empty.

Verdicts: each document's (kept or reason, sha1 of the kept text) per stage; the table counts the documents
whose verdict differs from REV's, and for quality the documents datatrove keeps and textmill rejects or the
other way round. --profile runs this checkout's stages once more (1 worker) under py-spy (the bench extra:
pip install -e ".[bench]"), sampling native frames too, and splits the samples by the frame the process was in:
textmill's own Python (the interpreter running textmill's code: its per-document code, and its workflow code
apart), C built-ins (str, dict, set, json, re, the garbage collector), libraries' native code (numpy, pyarrow,
ftfy's and fastText's), libraries' Python, Luigi, the standard library's Python (imports included), and the
system (I/O, memory); threads waiting are left out. A sampler charges nothing to the code it watches, unlike
cProfile, which makes Python calls look heavier than they are, and it sees the C work map() and numpy do for
Python code as C work. Beside it, the same samples charged to their innermost Python frame (a C call counted with
the Python that made it, as py-spy without --native counts), and by the outermost library on the stack (issue 67's
count: a sample under a library is that library's however textmill called it, imports apart; else the innermost
Python frame's owner), and textmill's largest per-document functions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAMBADA = ROOT / "tests" / "data" / "lambada_test.jsonl"
WEB_TEXTS = ROOT / "tests" / "data" / "web-texts.jsonl.gz"
GPT2_VOCAB, GPT2_MERGES = ROOT / "tests" / "data" / "gpt2-vocab.json", ROOT / "tests" / "data" / "gpt2-merges.txt"
# The chain: each step on the one before's kept documents (textmill: each stage as its command runs it, then
# `textmill tokenize`; datatrove: its MinHash dedup, then one pipeline of FTFYFormatter, the Gopher filters and its
# DocumentTokenizer with the same vocabulary; its language filter fetches its model from the hub and is left out).
CHAIN = ("dedup", "clean", "quality", "tokenize")


def write_corpus(folder: Path, documents: int, files: int, real_texts: bool = False) -> Path:
    """The generated corpus, with the repository's 861 real web texts (tests/data/web-texts.jsonl.gz) spread through
    it when `real_texts`."""
    import gzip

    from textmill.demo.synthweb import corpus_documents

    planted = tuple(json.loads(line)["text"] for line in LAMBADA.read_text().splitlines()[:50])
    folder.mkdir(parents=True)
    rows = list(corpus_documents(1, documents, planted))
    if real_texts:
        real = [json.loads(line) for line in gzip.open(WEB_TEXTS, "rt")]
        every = max(1, len(rows) // len(real))
        for k, row in enumerate(real):  # one real text after every `every` generated ones
            rows.insert(k * (every + 1) + every, {"id": f"web-{row['id']}", "text": row["text"]})
    for k in range(files):
        with open(folder / f"part-{k:02d}.jsonl", "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows[k::files])
    return folder


def verdicts(folder: Path) -> dict[str, list]:
    """id -> [reason or "kept", sha1 of its text] for every row a stage left in `folder`."""
    import pyarrow.parquet as pq

    seen: dict[str, list] = {}
    for path in sorted(folder.glob("*.parquet")) + sorted(folder.glob(".rejects/*.parquet")):
        table = pq.read_table(path).to_pylist()
        for row in table:
            seen[row["id"]] = [row.get("reason") or "kept", hashlib.sha1((row["text"] or "").encode()).hexdigest()[:12]]
    return seen


def textmill_stage(stage: str, corpus: Path, out: Path, workers: int, preset: str = "gopher") -> float:
    from textmill.pipeline.stage_configs import CleanConfig, DecontaminateConfig, DedupConfig, QualityConfig
    from textmill.workflows.commands import run_stage

    settings = {"quality": {"quality": QualityConfig(preset=preset)}, "dedup": {"dedup": DedupConfig()},
                "decontaminate": {"decontaminate": DecontaminateConfig(eval_files=(LAMBADA,))},
                "clean": {"clean": CleanConfig()}}
    started = time.perf_counter()
    if stage != "chain":
        run_stage(stage, [str(corpus)], out, settings[stage], workers)
        return time.perf_counter() - started
    given = corpus
    for step in CHAIN[:-1]:
        run_stage(step, [str(given)], out / step, settings[step], workers)
        given = out / step
    tokenize_kept(given, out / "tokens", workers)
    return time.perf_counter() - started


def tokenize_kept(shards: Path, out: Path, workers: int) -> None:
    """`textmill tokenize` of the kept shards with GPT-2's vocabulary, as the chain's last step."""
    from textmill.pipeline.shards import list_shards
    from textmill.tokenizers.preprocess import tokenize_files
    from textmill.tokenizers.tokenize_config import TokenizeConfig

    config = TokenizeConfig(vocab_file=GPT2_VOCAB, merge_file=GPT2_MERGES, workers=workers)
    out.mkdir(parents=True)
    tokenize_files(list_shards([shards]), out / "corpus", config.given_tokenizer(), config, progress=False)


def datatrove_stage(stage: str, corpus: Path, out: Path, workers: int, preset: str = "gopher") -> float | None:
    files = len(list(corpus.glob("*.jsonl")))  # datatrove shares out whole files
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    def reader():
        return JsonlReader(str(corpus), glob_pattern="*.jsonl", id_key="id")

    def run(pipeline, tasks, name, depends=None):
        return LocalPipelineExecutor(pipeline, tasks=tasks, workers=min(workers, tasks), logging_dir=str(out / "logs" / name),
                                     skip_completed=False, depends=depends)

    started = time.perf_counter()
    if stage == "quality" and preset == "gopher":
        from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter

        run([reader(), GopherRepetitionFilter(exclusion_writer=JsonlWriter(str(out / "rejected"))),
             GopherQualityFilter(exclusion_writer=JsonlWriter(str(out / "rejected"))), JsonlWriter(str(out / "kept"))],
            files, "quality").run()
    elif stage == "dedup":
        from datatrove.pipeline.dedup import MinhashDedupSignature
        from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                                      MinhashDedupFilter)

        from datatrove.utils.hashing import HashConfig

        config = MinhashConfig(hash_config=HashConfig(hash_fc="sha1"))  # its xxhash path passes str to xxhash 4
        signatures = run([reader(), MinhashDedupSignature(str(out / "signatures"), config=config)], files, "signatures")
        buckets = run([MinhashDedupBuckets(str(out / "signatures"), str(out / "buckets"), config=config)],
                      config.num_buckets, "buckets", signatures)
        clusters = run([MinhashDedupCluster(str(out / "buckets"), str(out / "remove"), config=config)], 1, "clusters",
                       buckets)
        run([reader(), MinhashDedupFilter(str(out / "remove")), JsonlWriter(str(out / "kept"))], files, "filter",
            clusters).run()
    elif stage == "chain":
        from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter
        from datatrove.pipeline.formatters import FTFYFormatter
        from datatrove.pipeline.tokens import DocumentTokenizer

        datatrove_stage("dedup", corpus, out / "dedup", workers)
        deduplicated = JsonlReader(str(out / "dedup" / "kept"), id_key="id")
        run([deduplicated, FTFYFormatter(), GopherRepetitionFilter(), GopherQualityFilter(),
             JsonlWriter(str(out / "kept")),
             DocumentTokenizer(str(out / "tokens"), tokenizer_name_or_path=str(gpt2_tokenizer_json(out)),
                               eos_token="<|endoftext|>", shuffle_documents=False)],
            files, "clean-quality-tokenize").run()
    else:
        return None
    return time.perf_counter() - started


def gpt2_tokenizer_json(out: Path) -> Path:
    """GPT-2's vocabulary and merges (tests/data) as the tokenizers library's one file, which datatrove loads."""
    from tokenizers import ByteLevelBPETokenizer

    path = out / "gpt2-tokenizer.json"
    ByteLevelBPETokenizer(str(GPT2_VOCAB), str(GPT2_MERGES)).save(str(path))
    return path


def datatrove_kept(out: Path) -> set[str]:
    import gzip

    return {json.loads(line)["id"] for path in (out / "kept").glob("*.jsonl.gz") for line in gzip.open(path, "rt")}


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended (Luigi's and datatrove's workers)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def child(args) -> None:
    """One variant's stages in this process; prints {stage: {"seconds", "cpu", ...}} as one JSON line."""
    corpus, out = Path(args.corpus), Path(args.out)
    result = {}
    for stage in args.stages:
        folder = out / stage
        cpu = cpu_seconds()
        if args.variant == "datatrove":
            seconds = datatrove_stage(stage, corpus, folder, args.workers[0], args.preset)
            result[stage] = None if seconds is None else {
                "seconds": seconds, "kept": sorted(datatrove_kept(folder)) if stage in ("quality", "chain") else None}
        else:
            seconds = textmill_stage(stage, corpus, folder, args.workers[0], args.preset)
            result[stage] = {"seconds": seconds, "verdicts": verdicts(folder / "quality" if stage == "chain" else folder)}
        if result[stage] is not None:
            result[stage]["cpu"] = cpu_seconds() - cpu
    print(json.dumps(result))


STDLIB = set(sys.stdlib_module_names)
_PYTHON_FRAME = re.compile(r"\((.*\.py|<[^>]+>):\d+\)$")  # py-spy's "function (file:line)"
_WAITING = ("pthread_cond_wait", "pthread_cond_timedwait", "PyThread_acquire_lock_timed", "epoll_wait", "select (")
# Native frames of the interpreter itself: running Python code, charged to the Python frame they run.
_INTERPRETER = re.compile(r"(_PyEval|_Py_Dealloc|Py_DECREF|Py_INCREF|_PyObject_Vectorcall|_PyFunction_Vectorcall|"
                          r"PyObject_Vectorcall|frame_dealloc)")


def python_kind(frame: str) -> str:
    """Whose Python a py-spy frame ("function (file:line)") runs."""
    file = _PYTHON_FRAME.search(frame).group(1) if frame else ""
    if file.endswith("bench_chain.py"):
        return "this benchmark (reading the verdicts)"
    if file.startswith("textmill/workflows/"):
        return "textmill Python, workflow"
    if file.startswith("textmill/"):
        return "textmill Python, per document"
    if file.startswith("luigi/"):
        return "Luigi"
    top = file.split("/")[0].removesuffix(".py")  # py-spy names a file from its sys.path entry
    return "standard library Python" if file.startswith("<") or top in STDLIB else "library Python"


_SYSTEM = ("libc.so", "libz.so", "ld-linux", "libstdc++", "libm.so")


def outermost_kind(frames: list[str], innermost: str) -> str:
    """A sample charged the way issue 67 counts: to imports when importing; else to the outermost library on the
    stack (its Python, or its native code called from textmill's: numpy, pyarrow, ftfy, fastText, tiktoken); else to
    the innermost Python frame's owner, textmill's per-document code with the C built-ins it calls."""
    if any("importlib" in frame for frame in frames):
        return "imports"
    for frame in frames:
        if _PYTHON_FRAME.search(frame):
            if python_kind(frame) == "library Python":
                return "libraries"
        elif "(" in frame and not any(name in frame for name in ("libpython", "python3", *_SYSTEM)):
            return "libraries"
    return python_kind(innermost)


def sample_kinds(stack: str) -> tuple[str, str, str, str] | None:
    """Where a sampled stack (py-spy's raw format: frames root first, ";"-separated) was: by its innermost
    frame, native ones included; by its innermost Python frame (a C call counted with the Python that made
    it); that Python frame; and by the outermost library (outermost_kind). None for a waiting thread."""
    frames = stack.split(";")
    python = [i for i, frame in enumerate(frames) if _PYTHON_FRAME.search(frame)]
    below = frames[python[-1] + 1 :] if python else frames
    if any(wait in frame for frame in below for wait in _WAITING):
        return None
    innermost = frames[python[-1]] if python else ""
    leaf = frames[-1]
    if leaf is innermost or ("libpython" in leaf and _INTERPRETER.match(leaf)) or "object.h" in leaf:
        native = python_kind(innermost)
    elif "libpython" in leaf:
        native = "C built-ins"
    elif any(lib in leaf for lib in _SYSTEM):
        native = "system (I/O, memory)"
    else:
        native = "library native code"
    return native, python_kind(innermost), re.sub(r":\d+\)$", ")", innermost), outermost_kind(frames, innermost)


def run_profiled(root: Path, corpus: Path, out: Path, stages: list[str],
                 preset: str) -> tuple[Counter, Counter, Counter, Counter]:
    """This checkout's stages once under py-spy: samples by kind three ways (sample_kinds), and textmill's
    per-document functions by their own samples."""
    if not shutil.which("py-spy"):
        sys.exit('bench_chain: --profile needs py-spy: pip install -e ".[bench]"')
    samples = out / "samples.txt"
    command = ["py-spy", "record", "--native", "--format", "raw", "--rate", "100", "--output", str(samples), "--",
               sys.executable, str(Path(__file__).resolve()), "--child", "--variant", "textmill", "--corpus",
               str(corpus), "--out", str(out), "--workers", "1", "--stages", *stages, "--preset", preset]
    done = subprocess.run(command, cwd=out.parent, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True,
                          text=True)
    if done.returncode:
        sys.exit(f"py-spy failed:\n{done.stderr[-3000:]}")
    native, python, functions, outermost = Counter(), Counter(), Counter(), Counter()
    for line in samples.read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        if kinds := sample_kinds(stack):
            native[kinds[0]] += int(count)
            python[kinds[1]] += int(count)
            outermost[kinds[3]] += int(count)
            if kinds[0] == "textmill Python, per document":
                functions[kinds[2]] += int(count)
    return native, python, functions, outermost


def run_child(variant: str, root: Path, corpus: Path, out: Path, stages: list[str], workers: int, preset: str) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--variant", variant, "--corpus", str(corpus),
               "--out", str(out), "--workers", str(workers), "--stages", *stages, "--preset", preset]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(command, cwd=out.parent, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{variant} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=5000, help="generated documents in the corpus")
    parser.add_argument("--files", type=int, default=10, help="JSON-lines files the corpus is written as (1: one big "
                        "file, which textmill cuts into units of [input] documents_per_shard and datatrove does not cut)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs of each variant; the fastest counts")
    parser.add_argument("--against", help="an earlier revision of textmill (git) to time beside this checkout")
    parser.add_argument("--workers", type=int, nargs="+", default=[1], help="worker counts (textmill and datatrove)")
    parser.add_argument("--stages", nargs="+", default=["quality", "decontaminate", "dedup", "clean"],
                        choices=["quality", "decontaminate", "dedup", "clean", "chain"],
                        help="the stages timed, each on the generated corpus; chain: dedup, clean, quality and "
                        "tokenize, each on the one before's output")
    parser.add_argument("--preset", choices=["gopher", "c4", "fineweb"], default="gopher",
                        help="the quality stage's [quality] preset")
    parser.add_argument("--real-texts", action="store_true", help="spread the repository's 861 real web texts "
                        "(tests/data/web-texts.jsonl.gz) through the generated corpus")
    parser.add_argument("--no-datatrove", action="store_true", help="leave datatrove out")
    parser.add_argument("--profile", action="store_true", help="split this checkout's time by where the code lives "
                        "(py-spy: the bench extra)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    tmp = Path(tempfile.mkdtemp(prefix="bench-chain-"))
    try:
        corpus = write_corpus(tmp / "corpus", args.documents, args.files, args.real_texts)
        variants = {"this checkout": ROOT}
        if args.against:
            worktree = tmp / "against"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(worktree), args.against],
                           check=True, capture_output=True)
            variants = {args.against: worktree, **variants}
        if not args.no_datatrove:
            variants["datatrove"] = ROOT
        best: dict[tuple, float] = {}
        best_cpu: dict[tuple, float] = {}
        seen: dict[tuple, dict] = {}
        for round_ in range(args.rounds):
            for workers in args.workers:
                for name, root in variants.items():
                    out = tmp / f"run-{round_}-{workers}-{len(seen)}"
                    out.mkdir()
                    result = run_child("datatrove" if name == "datatrove" else "textmill", root, corpus, out,
                                       args.stages, workers, args.preset)
                    for stage, r in result.items():
                        if r is not None:
                            key = (name, workers, stage)
                            best[key] = min(best.get(key, float("inf")), r["seconds"])
                            best_cpu[key] = min(best_cpu.get(key, float("inf")), r["cpu"])
                            seen[key] = r
                    shutil.rmtree(out)
                    print(f"  round {round_ + 1}, {workers} worker(s), {name}: "
                          + ", ".join(f"{s} {r['seconds']:.2f} s ({r['cpu']:.2f} CPU-s)" for s, r in result.items()
                                      if r), flush=True)
        report(args, variants, best, seen)
        report_cpu(args, variants, best_cpu)
        if args.profile:
            out = tmp / "profile"
            out.mkdir()
            native, python, functions, outermost = run_profiled(ROOT, corpus, out, args.stages, args.preset)
            total = sum(native.values())
            print(f"\nProfile of this checkout's {', '.join(args.stages)} (py-spy, native frames, 1 worker, {total} "
                  "samples of running threads), by the innermost frame | by the innermost Python frame | by the "
                  "outermost library:")
            for kind in sorted(set(native) | set(outermost), key=lambda k: -max(native[k], outermost[k])):
                print(f"  {kind:32} {native[kind] / total:6.1%} | {python[kind] / total:6.1%} | "
                      f"{outermost[kind] / total:6.1%}")
            print("textmill's per-document Python, its largest functions (own samples):")
            for function, samples in functions.most_common(10):
                print(f"  {function:70} {samples / total:6.1%}")
    finally:
        if args.against:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "against")],
                           capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def report(args, variants: dict, best: dict, seen: dict) -> None:
    print(f"\n{date.today()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"{args.documents} generated documents{' and 861 real web texts' if args.real_texts else ''}; fastest of "
          f"{args.rounds} interleaved rounds")
    names = list(variants)
    print("| stage | workers | " + " | ".join(f"{n} (s)" for n in names) + " | speed-up | verdicts differing |")
    print("|---|---|" + "---|" * (len(names) + 2))
    for stage in args.stages:
        for workers in args.workers:
            cells = [f"{best[(n, workers, stage)]:.2f}" if (n, workers, stage) in best else "not run" for n in names]
            speedup, differing = "", ""
            if args.against and (args.against, workers, stage) in best:
                speedup = f"{best[(args.against, workers, stage)] / best[('this checkout', workers, stage)]:.2f}x"
                old, new = seen[(args.against, workers, stage)]["verdicts"], seen[("this checkout", workers, stage)]["verdicts"]
                differing = str(sum(old.get(i) != new.get(i) for i in set(old) | set(new)))
            if stage == "quality" and ("datatrove", workers, stage) in seen:
                ours = {i for i, (verdict, _) in seen[("this checkout", workers, stage)]["verdicts"].items() if verdict == "kept"}
                theirs = set(seen[("datatrove", workers, stage)]["kept"])
                differing += f" (datatrove: {len(ours ^ theirs)} of {args.documents} kept by one only)"
            print(f"| {stage} | {workers} | " + " | ".join(cells) + f" | {speedup} | {differing} |")


def report_cpu(args, variants: dict, best_cpu: dict) -> None:
    """CPU seconds of each variant's process tree (its workers included), fastest of the rounds, and the ratio of
    datatrove's to this checkout's: per core, what wall seconds hide when workers wait."""
    names = list(variants)
    print("\nCPU seconds of the whole process tree (fastest of the rounds):")
    print("| stage | workers | " + " | ".join(f"{n} (CPU-s)" for n in names) + " | datatrove / this checkout |")
    print("|---|---|" + "---|" * (len(names) + 1))
    for stage in args.stages:
        for workers in args.workers:
            cells = [f"{best_cpu[(n, workers, stage)]:.2f}" if (n, workers, stage) in best_cpu else "not run" for n in names]
            ratio = ""
            if ("datatrove", workers, stage) in best_cpu:
                ratio = f"{best_cpu[('datatrove', workers, stage)] / best_cpu[('this checkout', workers, stage)]:.2f}x"
            print(f"| {stage} | {workers} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main()
