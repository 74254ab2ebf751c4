"""`textmill demo`: the corpus pipeline end to end on a synthetic web served from 127.0.0.1.

It generates seeded English pages plus junk (near-duplicates, other languages, mojibake, short pages,
blacklisted and broken links, server faults), serves them locally, runs every corpus stage on them with
the real libraries (newspaper3k, datasketch, ftfy, langdetect), trains a byte-level BPE on the result and
writes Megatron .bin/.idx token files, and prints the funnel. No internet.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from textmill import synthweb


def cloze_passages(seed: int, count: int) -> list[str]:
    """Held-out generated passages in LAMBADA's shape: a few sentences whose last word is the target."""
    rng = random.Random(seed)
    return [synthweb.paragraph(rng, 4).rstrip(".!?") for _ in range(count)]


def run_demo(workdir: Path, pages: int, seed: int, shards: int, vocab_size: int) -> str:
    from textmill.cli import decontaminate_line, dedup_line, summary_line, tokenize_line, trained_line
    from textmill.pipeline.blacklist import UrlRules, blacklist_files
    from textmill.pipeline.clean import CleanConfig, clean_shards
    from textmill.pipeline.decontaminate import DecontaminateConfig, decontaminate_shards
    from textmill.pipeline.dedup import DedupConfig, dedup_shards
    from textmill.pipeline.scrape import ScrapeConfig, scrape_shards
    from textmill.pipeline.shards import list_shards
    from textmill.pipeline.shuffle import shuffle_shards
    from textmill.tokenizers.preprocess import TokenizeConfig, dataset_prefix, tokenize_files
    from textmill.tokenizers.train import train_bpe_on_files

    workdir.mkdir(parents=True, exist_ok=True)
    eval_texts = cloze_passages(seed + 1, 50)
    eval_file = workdir / "eval" / "cloze.jsonl"
    eval_file.parent.mkdir(parents=True, exist_ok=True)
    eval_file.write_text("".join(json.dumps({"text": t}) + "\n" for t in eval_texts))

    web = synthweb.build_web(
        seed=seed,
        articles=pages,
        near_duplicates=pages // 10,
        foreign=pages // 20,
        mojibake=pages // 30,
        short=pages // 20,
        planted=tuple(eval_texts[:3]),
    )
    lines = []
    with synthweb.serve(web) as server:
        urls = synthweb.url_list(web, server)
        url_dir = workdir / "urls"
        url_dir.mkdir(exist_ok=True)
        half = len(urls) // 2
        (url_dir / "RS_demo-01.txt").write_text("\n".join(urls[:half]) + "\n")
        (url_dir / "RS_demo-02.txt").write_text("\n".join(urls[half:]) + "\n")

        t = time.perf_counter()
        out = workdir / "1-blacklist"
        lines.append(summary_line("blacklist", blacklist_files([url_dir], out, UrlRules()), out, t))
        t = time.perf_counter()
        cfg = ScrapeConfig(timeout_s=5.0, allow_private=True, max_bytes=2 * 1024 * 1024)
        manifests = scrape_shards(list_shards([out]), workdir / "2-scrape", cfg)
        lines.append(summary_line("scrape", manifests, workdir / "2-scrape", t))

    t = time.perf_counter()
    manifests, clusters = dedup_shards(list_shards([workdir / "2-scrape"]), workdir / "3-dedup", DedupConfig())
    lines += [summary_line("dedup", manifests, workdir / "3-dedup", t), dedup_line(clusters)]
    t = time.perf_counter()
    manifests = clean_shards(list_shards([workdir / "3-dedup"]), workdir / "4-clean", CleanConfig())
    lines.append(summary_line("clean", manifests, workdir / "4-clean", t))
    t = time.perf_counter()
    manifests = shuffle_shards(list_shards([workdir / "4-clean"]), workdir / "5-shuffle", shards, seed)
    lines.append(summary_line("shuffle", manifests, workdir / "5-shuffle", t))
    t = time.perf_counter()
    dcfg = DecontaminateConfig()
    manifests, info = decontaminate_shards(list_shards([workdir / "5-shuffle"]), workdir / "6-decontaminate", [eval_file], dcfg)
    lines += [summary_line("decontaminate", manifests, workdir / "6-decontaminate", t), decontaminate_line(info, dcfg)]
    t = time.perf_counter()
    corpus = list_shards([workdir / "6-decontaminate"])
    prefix = workdir / "7-tokenize" / "demo"
    tokenizer = train_bpe_on_files(corpus, ("text",), vocab_size, prefix)
    m = tokenize_files(corpus, prefix, tokenizer, TokenizeConfig(append_eod=True))
    lines += [trained_line(tokenizer), tokenize_line(m, prefix, t)]
    return "\n".join(["textmill demo: corpus funnel", *lines, f"token files: {dataset_prefix(prefix, 'text')}.bin/.idx"])


def cmd_demo(args) -> str:
    return run_demo(Path(args.workdir), args.pages, args.seed, args.num_shards, args.vocab_size)


def add_demo_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="Run the corpus pipeline on a generated web served from 127.0.0.1 (no internet needed).",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--workdir", default="textmill-demo", help="directory for every stage's shards and manifests")
    p.add_argument("--pages", type=int, default=300, help="generated English articles (junk pages scale with it)")
    p.add_argument("--num-shards", type=int, default=4, help="shards after the shuffle")
    p.add_argument("--seed", type=int, default=1234, help="seed of the generated web and the shuffle")
    p.add_argument("--vocab-size", type=int, default=2048, help="size of the byte-level BPE trained on the demo corpus")
    p.set_defaults(func=cmd_demo)
