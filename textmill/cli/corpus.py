"""`textmill blacklist | scrape | dedup | clean | shuffle | decontaminate`: each corpus stage on its own,
over shards or loose JSON lines, ending with a one-line summary."""

from __future__ import annotations

import argparse
from pathlib import Path

from textmill.cli.options import ArgumentDefaults, Timer, add_tokenizer_files, gpt2_tokenizer


def summary_line(stage: str, manifests: list[dict], output: Path, seconds: float) -> str:
    from textmill.report import stage_line, stage_summary

    return stage_line(stage_summary(stage, manifests, output, seconds))


def cmd_blacklist(args) -> str:
    from textmill.pipeline.blacklist import UrlRules, blacklist_files

    timer = Timer()
    rules = UrlRules.with_extra(args.domain_blacklist, args.extension_blacklist)
    manifests = blacklist_files(args.inputs, Path(args.output), rules)
    return summary_line("blacklist", manifests, Path(args.output), timer.seconds)


def scrape_config(args):
    from textmill.pipeline.scrape import ScrapeConfig

    return ScrapeConfig(
        concurrency=args.concurrency,
        timeout_s=args.timeout,
        extract_timeout_s=args.extract_timeout,
        max_bytes=args.max_bytes,
        max_redirects=args.max_redirects,
        allow_private=args.allow_private_addresses,
        allow_networks=tuple(args.allow_network),
        keep_html=args.keep_html,
    )


def cmd_scrape(args) -> str:
    from textmill.pipeline.scrape import scrape_shards
    from textmill.pipeline.shards import list_shards

    timer = Timer()
    manifests = scrape_shards(list_shards(args.inputs), Path(args.output), scrape_config(args), args.extract_workers)
    return summary_line("scrape", manifests, Path(args.output), timer.seconds)


def cmd_dedup(args) -> str:
    from textmill.pipeline.dedup import DedupConfig, dedup_shards
    from textmill.pipeline.shards import list_shards

    from textmill.report import dedup_line

    timer = Timer()
    cfg = DedupConfig(args.shingle_size, args.shingle_unit, args.num_perm, args.bands, args.threshold, args.seed)
    manifests, clusters = dedup_shards(list_shards(args.inputs), Path(args.output), cfg)
    return summary_line("dedup", manifests, Path(args.output), timer.seconds) + "\n" + dedup_line(clusters)


def cmd_clean(args) -> str:
    from textmill.pipeline.clean import CleanConfig, clean_shards
    from textmill.pipeline.shards import list_shards

    timer = Timer()
    cfg = CleanConfig(args.language, args.min_tokens, args.langdetect_chars, args.seed)
    manifests = clean_shards(list_shards(args.inputs), Path(args.output), cfg, gpt2_tokenizer(args))
    return summary_line("clean", manifests, Path(args.output), timer.seconds)


def cmd_shuffle(args) -> str:
    from textmill.pipeline.shards import list_shards
    from textmill.pipeline.shuffle import shuffle_shards

    timer = Timer()
    manifests = shuffle_shards(list_shards(args.inputs), Path(args.output), args.num_shards, args.seed)
    return summary_line("shuffle", manifests, Path(args.output), timer.seconds)


def cmd_decontaminate(args) -> str:
    from textmill.pipeline.decontaminate import DecontaminateConfig, decontaminate_shards
    from textmill.pipeline.shards import list_shards

    from textmill.report import decontaminate_line

    timer = Timer()
    cfg = DecontaminateConfig(args.ngram, args.min_ngram, args.cut_chars, args.min_fragment_chars, args.max_pieces, args.key_threshold)
    manifests, info = decontaminate_shards(list_shards(args.inputs), Path(args.output), [Path(p) for p in args.eval_set], cfg)
    return summary_line("decontaminate", manifests, Path(args.output), timer.seconds) + "\n" + decontaminate_line(info, cfg.key_threshold)


def add_parsers(sub) -> None:
    fmt = ArgumentDefaults

    def stage(name: str, help: str, inputs_help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, formatter_class=fmt)
        p.add_argument("inputs", nargs="+", metavar="INPUT", help=inputs_help)
        p.add_argument("--output", "-o", required=True, help="output directory: one shard per input shard, with rejects and a manifest")
        return p

    docs = "document shards (Parquet from an earlier stage, or loose JSON lines with a 'text' field), or directories of them"

    p = stage("blacklist", "Filter URL lists: malformed, non-http(s), too short, blacklisted domain or extension, duplicate.",
              "URL lists (.txt, .gz, .bz2, .xz; one URL a line) or directories of them; each file becomes one shard")
    p.add_argument("--domain-blacklist", action="append", default=[], type=Path, metavar="FILE",
                   help="extra domain labels to block, one a line (adds to the bundled list; repeatable)")
    p.add_argument("--extension-blacklist", action="append", default=[], type=Path, metavar="FILE",
                   help="extra file extensions to block, one a line (adds to the bundled list; repeatable)")
    p.set_defaults(func=cmd_blacklist)

    p = stage("scrape", "Fetch every URL of the URL shards and extract title and text with newspaper3k.",
              "URL shards written by `textmill blacklist`, or directories of them")
    p.add_argument("--concurrency", type=int, default=32, help="URLs fetched at once")
    p.add_argument("--timeout", type=float, default=30.0, help="hard wall-clock limit per URL in seconds (DNS, redirects and body included)")
    p.add_argument("--extract-timeout", type=float, default=10.0,
                   help="hard limit in seconds on newspaper3k's time per page; a page over it is rejected as "
                   "extraction_timeout and its extraction process replaced")
    p.add_argument("--max-bytes", type=int, default=5 * 1024 * 1024, help="largest page body accepted, after decompression")
    p.add_argument("--max-redirects", type=int, default=5, help="redirects followed per URL")
    p.add_argument("--allow-private-addresses", action="store_true",
                   help="fetch from private, loopback and link-local addresses (refused by default)")
    p.add_argument("--allow-network", action="append", default=[], metavar="CIDR",
                   help="fetch from this non-public address or network all the same, e.g. a local mirror at "
                   "10.0.0.5 or 127.0.0.2/32 (repeatable; narrower than --allow-private-addresses)")
    p.add_argument("--keep-html", action="store_true", help="also write NAME.html.parquet with the raw HTML of each fetched page")
    p.add_argument("--extract-workers", type=int, default=2, help="processes running newspaper3k (0: threads in this process, where --extract-timeout cannot stop a page: "
                   "for trusted pages only)")
    p.set_defaults(func=cmd_scrape)

    p = stage("dedup", "Remove near-duplicate documents with MinHash LSH; the first document of each cluster stays.", docs)
    p.add_argument("--shingle-size", type=int, default=5, help="n of the n-gram shingles")
    p.add_argument("--shingle-unit", choices=["word", "char"], default="word", help="shingle words or characters (Megatron: char)")
    p.add_argument("--num-perm", type=int, default=128, help="MinHash permutations (signature length)")
    p.add_argument("--bands", type=int, default=16, help="LSH bands; num-perm must be divisible by it")
    p.add_argument("--threshold", type=float, default=0.7, help="estimated Jaccard similarity at or above which documents are duplicates")
    p.add_argument("--seed", type=int, default=1, help="MinHash seed")
    p.set_defaults(func=cmd_dedup)

    p = stage("clean", "Fix mojibake with ftfy, keep one language (seeded langdetect), drop short documents.", docs)
    p.add_argument("--language", default="en", help="langdetect code of the language to keep")
    p.add_argument("--min-tokens", type=int, default=128, help="drop documents with fewer tokens (end-of-document token included)")
    p.add_argument("--langdetect-chars", type=int, default=4000, help="characters of each document langdetect reads")
    p.add_argument("--seed", type=int, default=0, help="langdetect seed")
    add_tokenizer_files(p, "count exact BPE tokens (default: a lower bound that needs no vocabulary)")
    p.set_defaults(func=cmd_clean)

    p = stage("shuffle", "Shuffle all documents globally with a seed, out of core, into N shards.", docs)
    p.add_argument("--num-shards", type=int, required=True, help="number of output shards (buckets)")
    p.add_argument("--seed", type=int, default=1234, help="shuffle seed")
    p.set_defaults(func=cmd_shuffle)

    p = stage("decontaminate", "Cut evaluation-set n-gram overlaps (e.g. LAMBADA) out of training documents.", docs)
    p.add_argument("--eval-set", action="append", required=True, metavar="FILE",
                   help="evaluation set as JSON lines with a 'text' field, e.g. lambada_test.jsonl (repeatable)")
    p.add_argument("--ngram", type=int, default=13, help="n-gram length matched")
    p.add_argument("--min-ngram", type=int, default=8, help="evaluation texts of this many words up to ngram-1 are matched whole")
    p.add_argument("--cut-chars", type=int, default=200, help="characters removed on each side of a match")
    p.add_argument("--min-fragment-chars", type=int, default=200, help="fragments this short or shorter are dropped")
    p.add_argument("--max-pieces", type=int, default=10, help="documents cut into more fragments are dropped whole")
    p.add_argument("--key-threshold", type=int, default=10, help="n-grams seen this often or more in training are not used")
    p.set_defaults(func=cmd_decontaminate)
