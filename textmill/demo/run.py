"""`textmill demo`: the whole chain, Reddit submission dumps to an evaluated model, on a synthetic web served from
127.0.0.1.

It generates seeded English pages plus junk (near-duplicates, other languages, mojibake, short pages,
blacklisted and broken links, server faults), serves them locally, writes two months of Reddit submissions
linking to them in Pushshift's schema (zstd, as the real dumps are; self posts, low scores and NSFW submissions
among them, which OpenWebText's rules leave out), and runs the Luigi graph of `textmill run` on them with the real
libraries (trafilatura, datasketch, ftfy, fastText): the dumps' links, blacklist,
scrape, dedup, clean, shuffle, decontaminate, a byte-level BPE trained on the corpus, Megatron .bin/.idx
token files; then it trains a tiny GPT on CPU, scores it on a LAMBADA-format cloze set built from
held-out generated text (and on a real LAMBADA file with --lambada), exports it to Hugging Face format,
and ends with a sample of its text. No internet. The run's TOML file is WORKDIR/run.toml: `textmill run
WORKDIR/run.toml` repeats it (doing nothing, as everything is finished) and `textmill status` lists it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from pathlib import Path

from textmill.demo import synthweb
from textmill.demo.reddit import write_dumps
from textmill.errors import TextmillError
from textmill.settings import ArgumentDefaults


def cloze_passages(seed: int, count: int) -> list[str]:
    """Held-out generated passages in LAMBADA's shape: a few sentences whose last word is the target."""
    rng = random.Random(seed)
    return [synthweb.paragraph(rng, 4).rstrip(".!?") for _ in range(count)]


# The ablation's web is the novel's paragraphs but its last 200, which are the held-out English: 100 passages of two
# paragraphs each, in LAMBADA's shape (the closing punctuation and quotation marks taken off the last word).
NOVEL_HELD_OUT_PASSAGES = 100


def novel_split() -> tuple[list[str], list[str]]:
    """(the paragraphs the ablation's web is made of, the held-out passages)"""
    novel = synthweb.novel_paragraphs()
    held_out = novel[-2 * NOVEL_HELD_OUT_PASSAGES:]
    passages = [" ".join(held_out[i: i + 2]).rstrip(".!?,;:’”\"' ") for i in range(0, len(held_out), 2)]
    return novel[: -len(held_out)], passages


def classifier_positives() -> list[str]:
    """The classifier variant's documents of the kind to keep: Emma's opening, five paragraphs a document (60)."""
    paragraphs = synthweb.novel_paragraphs(synthweb.OTHER_NOVEL)
    return ["\n\n".join(paragraphs[i: i + 5]) for i in range(0, len(paragraphs), 5)]


DEMO_CONFIG = """\
# Written by `textmill demo`; `textmill run --example-config` documents every field.
[run]
work_dir = "work"
reddit_dumps = ["dumps"]   # Pushshift-style RS_*.zst; [reddit] min_score = 3 takes OpenWebText's links
seed = {seed}

[scrape]
timeout_s = 5.0
allow_private_addresses = true   # the synthetic web is on 127.0.0.1
max_bytes = 2097152

[shuffle]
num_shards = {shards}

[decontaminate]
eval_files = {eval_files}

[tokenize]
vocab_size = {vocab_size}

[train]
model_preset = "tiny"
seq_length = 128
micro_batch_size = 8
global_batch_size = 16
train_iters = {train_iters}
lr = 0.003
min_lr = 0.0003
lr_warmup_iters = 20
eval_interval = {eval_interval}
eval_iters = 8
split = "95,5,0"
log_interval = {log_interval}
seed = {seed}
cpu_threads = {cpu_threads}   # the cores free when the demo started (demo.run.free_cores)

[evaluate]
lambada = {eval_files}
strict = true

[export]
hf = true
"""

# `textmill demo --ablate`: what the chain's cleanup is worth, Gopher's quality rules on top of it, and a classifier
# trained in the run in its place, each variant's model trained twice.
DEMO_ABLATION = """
[ablation]
seeds = [1, 2]
baseline = "default"
held_out = {held_out}

[ablation.variants.no-cleanup]   # every language, every length, no quality rules
clean = {{ language = "any", min_tokens = 0 }}

[ablation.variants.default]      # the chain as configured above

[ablation.variants.gopher]       # the chain, and Gopher's quality and repetition rules
quality = {{ preset = "gopher" }}

# No cleanup rules: a classifier trained in the run instead, another novel's opening against the raw corpus. Most of
# that corpus is good pages, trained on as negatives, so they score low (0.14 and up on this web, the junk under
# 0.10, as `textmill inspect --sort classifier_score` shows): the threshold is set from those scores, where GPT-3's
# Pareto rule, made for a classifier sure of what it keeps, would keep few of them.
[ablation.variants.classifier]
clean = {{ language = "any", min_tokens = 0 }}
classify = {{ positives = ["positives.jsonl"], rule = "threshold", threshold = 0.15 }}
"""
# The ablation's web carries more junk than the plain demo's: of every 10 articles, 5 pages in another language,
# 1 near-duplicate, 1 of mojibake and 1 too short to train on (the demo's own shares, not a measured crawl's).
ABLATION_JUNK = {"near_duplicates": 10, "foreign": 2, "mojibake": 10, "short": 10}


def run_demo(workdir: Path, pages: int, seed: int, shards: int, vocab_size: int, train_iters: int,
             lambada: Path | None, port: int = 0, ablate: bool = False) -> str:
    from textmill.report.lines import funnel_lines
    from textmill.workflows.runner import run_workflow

    started = time.perf_counter()
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if ablate:
        web_paragraphs, eval_texts = novel_split()
        if pages > len(web_paragraphs):
            raise TextmillError(f"--pages {pages}: the ablation's web has {len(web_paragraphs)} paragraphs of the "
                                "novel to make articles of; ask for at most that many")
        (workdir / "positives.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in classifier_positives()))
    else:
        web_paragraphs, eval_texts = None, cloze_passages(seed + 1, 100)
    eval_file = workdir / "eval" / ("novel-held-out.jsonl" if ablate else "cloze.jsonl")
    eval_file.parent.mkdir(parents=True, exist_ok=True)
    eval_file.write_text("".join(json.dumps({"text": t}) + "\n" for t in eval_texts))
    eval_files = [str(eval_file)] + ([str(Path(lambada).resolve())] if lambada else [])
    if lambada and not Path(lambada).is_file():
        raise TextmillError(f"--lambada {lambada}: no such file")

    junk = ABLATION_JUNK if ablate else {"near_duplicates": 10, "foreign": 20, "mojibake": 30, "short": 20}
    web = synthweb.build_web(seed=seed, articles=pages, **{kind: pages // every for kind, every in junk.items()},
                             planted=tuple(eval_texts[:3]), real_paragraphs=web_paragraphs)
    config = workdir / "run.toml"
    with serve_web(web, port) as server:
        urls = synthweb.url_list(web, server)
        # Links only submissions OpenWebText's rules leave out make (low scores, NSFW): never fetched.
        left_out = tuple(u for u in urls if "/short/" in u)
        write_dumps([u for u in urls if u not in left_out], workdir / "dumps", ("2011-01", "2011-02"), seed,
                    left_out=left_out)
        config.write_text(DEMO_CONFIG.format(seed=seed, shards=shards, eval_files=json.dumps(eval_files),
                                             vocab_size=vocab_size, train_iters=train_iters, cpu_threads=free_cores(),
                                             eval_interval=max(1, train_iters // 4),
                                             log_interval=max(1, train_iters // 12))
                          + (DEMO_ABLATION.format(held_out=json.dumps([str(eval_file)])) if ablate else ""))
        if ablate:
            return ablation_lines(config, started)
        ok, summary, record, folder = run_workflow(config)
    if not ok:
        print(summary)
        raise TextmillError(f"the demo's run did not finish; `textmill status {config}` lists what failed")

    trained, exported = record.train, record.export
    lines = ["", "textmill demo: corpus funnel (submissions in, kept and rejected at each stage, with reasons)",
             *funnel_lines(record), "",
             f"train: tiny GPT, {trained.iterations} iterations on CPU, validation loss {trained.valid_loss:.3f} "
             f"-> {trained.checkpoints}"]
    for r in record.evaluate:
        name = "cloze set (held-out generated text)" if r.file == str(eval_file) else Path(r.file).name
        lines.append(f"evaluate: {name}: strict last-word accuracy {r.accuracy:.1%} ({r.correct}/{r.total}), "
                     f"perplexity {r.perplexity:.1f}")
    lines.append(f"export: Hugging Face {exported.family} model -> {exported.output}")
    lines += [f"report: {folder / 'report.html'} (also {workdir / 'work' / 'report.html'})",
              "", "a sample (top-p 0.9, seed 1):", sample(Path(trained.checkpoints), "The old sailor"), "",
              f"textmill demo: done in {time.perf_counter() - started:.0f}s; the run is {config}"]
    return "\n".join(lines)


def free_cores() -> int:
    """The cores no other process kept busy over the last minute, at least one: the cores less the whole cores of the
    load average (an idle machine's load of 0.6 leaves both of two cores: one thread of two makes the demo's step 1.5x
    slower). torch computes with a thread per core by default, and at every operation each thread waits for the
    others: on a busy machine, threads past the free cores made a step several times slower than the share of the CPU
    lost (benchmarks/bench_busy.py)."""
    return max(1, (os.cpu_count() or 1) - int(os.getloadavg()[0]))


def ablation_lines(config: Path, started: float) -> str:
    from textmill.report.ablation import answer_lines
    from textmill.workflows.ablation import run_ablation

    record, folder = run_ablation(config)
    return "\n".join(["", "textmill demo --ablate: a tiny GPT per variant and seed, the same tokens each; bits per byte "
                      "of held-out English (novel-held-out: the novel's last passages, which the web does not serve; "
                      "lambada_passages: LAMBADA's; own_held_out: each variant's own held-out split), lower is "
                      "better; * where every seed of a variant beats every seed of the other",
                      *answer_lines(record), "",
                      f"textmill demo --ablate: done in {time.perf_counter() - started:.0f}s; the record is {folder}, "
                      f"the run file {config} (`textmill ablate` on it repeats it)"])


@contextlib.contextmanager
def serve_web(web, port: int):
    """The generated web at `port`, or at a free port when that one is taken. The port is part of every
    URL, so of every document id and of the shuffle: the same port gives the same corpus and model."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(synthweb.serve(web, port=port))
        except OSError as exc:
            print(f"textmill demo: port {port} is taken ({exc.strerror}); serving on a free port, so the corpus "
                  "will not be byte-for-byte the same as on another run", flush=True)
            server = stack.enter_context(synthweb.serve(web))
        yield server


def sample(checkpoints: Path, prompt: str) -> str:
    from textmill.inference.generate import SamplingParams, TokenText, generate
    from textmill.trainer.checkpoint import checkpoint_tokenizer, load_model

    model, ckpt = load_model(checkpoints)
    tokenizer = checkpoint_tokenizer(checkpoints, ckpt.meta)
    params = SamplingParams(tokens_to_generate=60, top_p=0.9, seed=1)
    [g] = generate(model, TokenText(tokenizer), [tokenizer.encode(prompt)], params, tokenizer.eod)
    generated = g.generated[:-1] if g.finish_reason == "eod" else g.generated
    return tokenizer.decode(g.tokens[: g.prompt_length] + generated)


def cmd_demo(args) -> str:
    from textmill.io.progress import heartbeat

    with heartbeat("textmill demo"):  # a line at least every 10 s, whatever step is quiet
        return run_demo(Path(args.workdir), args.pages, args.seed, args.num_shards, args.vocab_size, args.train_iters,
                        args.lambada, args.port, args.ablate)


def add_demo_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="Run the whole chain on a generated web served from 127.0.0.1: corpus, tiny GPT, evaluation (no internet).",
        description=__doc__,
        formatter_class=ArgumentDefaults,
    )
    p.add_argument("--workdir", default="textmill-demo", help="directory for every stage's shards and manifests")
    p.add_argument("--pages", type=int, default=300, help="generated English articles (junk pages scale with it)")
    p.add_argument("--num-shards", type=int, default=4, help="shards after the shuffle")
    p.add_argument("--seed", type=int, default=1234, help="seed of the generated web and the shuffle")
    p.add_argument("--vocab-size", type=int, default=2048, help="size of the byte-level BPE trained on the demo corpus")
    p.add_argument("--train-iters", type=int, default=300, help="training iterations of the tiny GPT")
    p.add_argument("--lambada", type=Path, help="also evaluate on this LAMBADA file (e.g. lambada_test.jsonl)")
    p.add_argument("--port", type=int, default=18737, help="port of the generated web on 127.0.0.1 (URLs include it, "
                   "so the same port gives the same corpus; 0: any free port)")
    p.add_argument("--ablate", action="store_true",
                   help="instead of one run, an ablation of four variants of it (no cleanup; the chain as it is; "
                   "with Gopher's quality rules; no cleanup rules but a classifier trained in the run), each trained "
                   "with two seeds on a web whose articles are a real "
                   "novel's paragraphs (Pride and Prejudice) and whose junk is more, compared in bits per byte of "
                   "held-out English: the novel's last passages and LAMBADA's (textmill ablate; docs/ablations.md)")
    p.set_defaults(func=cmd_demo)
