"""`textmill reddit-urls | blacklist | scrape | extract | dedup | clean | quality | shuffle | decontaminate`: each
corpus stage on its own, over shards or loose JSON lines, as the tasks `textmill run` runs (textmill.workflows.commands), ending
with a one-line summary."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from textmill.cli.options import ArgumentDefaults, Timer, add_tokenizer_files
from textmill.errors import NothingKept, TextmillError
from textmill.pipeline.stage_configs import (
    EXTRACTION_SETTINGS,
    BlacklistConfig,
    CleanConfig,
    DecontaminateConfig,
    DedupConfig,
    InputConfig,
    QualityConfig,
    RedditConfig,
    ScrapeConfig,
    ShuffleConfig,
    WarcConfig,
)
from textmill.settings import add_arguments, from_namespace


def run_command(args, stage: str, settings: dict) -> tuple:
    """Run `stage` through its tasks (textmill.workflows.commands); its summary line and its StageResult. A
    stage that rejected most of its input for one reason says so on stderr, with the remedy where there is one;
    one that kept nothing prints its summary and ends with an error (exit status 1)."""
    from collections import Counter

    from textmill.report.lines import no_responses, nothing_kept, reject_warning, stage_line, stage_summary
    from textmill.settings import resolve
    from textmill.workflows.commands import run_stage

    if args.workers < 1:
        raise TextmillError(f"--workers must be at least 1, not {args.workers}")
    if hasattr(args, "documents_per_shard"):  # how the given files are cut into units of work
        settings = {**settings, "input": from_namespace(InputConfig, args)}
    timer = Timer()
    result = run_stage(stage, args.inputs, args.output, settings, args.workers, getattr(args, "output_format", "parquet"))
    summary = stage_summary(stage, result.manifests, resolve(args.output, Path.cwd()), timer.seconds)
    warning = reject_warning(summary)
    if warning:
        print(f"textmill {stage}: {warning}", file=sys.stderr, flush=True)
    if not summary.kept:
        print(stage_line(summary), flush=True)
        if stage == "warc" and not summary.input:  # records there, but not one page among them
            others = Counter()
            for manifest in result.manifests:
                others.update(manifest.get("other_records", {}))
            raise NothingKept(no_responses(dict(others)))
        raise NothingKept(nothing_kept(summary))
    return stage_line(summary), result


def cmd_reddit_urls(args) -> str:
    return run_command(args, "reddit-urls", {"reddit": from_namespace(RedditConfig, args)})[0]


def cmd_blacklist(args) -> str:
    return run_command(args, "blacklist", {"blacklist": from_namespace(BlacklistConfig, args)})[0]


def cmd_scrape(args) -> str:
    return run_command(args, "scrape", {"scrape": from_namespace(ScrapeConfig, args)})[0]


def cmd_warc(args) -> str:
    settings = {"scrape": from_namespace(ScrapeConfig, args), "warc": from_namespace(WarcConfig, args)}
    return run_command(args, "warc", settings)[0]


def cmd_extract(args) -> str:
    return run_command(args, "extract", {"scrape": from_namespace(ScrapeConfig, args)})[0]


def cmd_dedup(args) -> str:
    from textmill.report.lines import dedup_line

    line, result = run_command(args, "dedup", {"dedup": from_namespace(DedupConfig, args)})
    return line + "\n" + dedup_line(result.record)


def cmd_clean(args) -> str:
    from textmill.tokenizers.tokenize_config import TokenizeConfig

    if (args.vocab_file is None) != (args.merge_file is None):
        raise TextmillError("--vocab-file and --merge-file go together")
    tokenizer = TokenizeConfig(vocab_file=args.vocab_file, merge_file=args.merge_file)
    return run_command(args, "clean", {"clean": from_namespace(CleanConfig, args), "tokenize": tokenizer})[0]


def cmd_quality(args) -> str:
    config = from_namespace(QualityConfig, args)
    if config.preset == "none":
        raise TextmillError("choose the rules to apply: --preset gopher, c4 or fineweb")
    from textmill.report.lines import quality_line

    line, result = run_command(args, "quality", {"quality": config})
    return line if "c4" not in config.rules else line + "\n" + quality_line(result.manifests)


def cmd_shuffle(args) -> str:
    return run_command(args, "shuffle", {"shuffle": from_namespace(ShuffleConfig, args)})[0]


def cmd_decontaminate(args) -> str:
    from textmill.report.lines import decontaminate_line

    config = from_namespace(DecontaminateConfig, args)
    if not config.eval_files:
        raise TextmillError("give the evaluation sets to cut out: --eval-files FILE (repeatable)")
    line, result = run_command(args, "decontaminate", {"decontaminate": config})
    return line + "\n" + decontaminate_line(result.record, config.key_threshold)


def add_parsers(sub) -> None:
    """One command per stage; its options are the fields of the stage's config (textmill.pipeline.stage_configs)."""

    def stage(name: str, help: str, inputs_help: str, config: type, **options) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, formatter_class=ArgumentDefaults)
        p.add_argument("inputs", nargs="+", metavar="INPUT", help=inputs_help)
        p.add_argument("--output", "-o", required=True, help="output folder (or URL in a store): the stage's shards, "
                       "rejects and manifests; its earlier steps in OUTPUT/.textmill. Run again, it skips finished steps")
        p.add_argument("--workers", type=int, default=1,
                       help="steps run at once: this many long-lived worker processes, which end with the command")
        if name not in ("reddit-urls", "blacklist"):  # their output is URL lists
            p.add_argument("--output-format", choices=("parquet", "jsonl.gz"), default="parquet",
                           help="the kept documents as zstd Parquet (what `datasets.load_dataset(\"parquet\", "
                           "data_dir=OUTPUT)` reads), or as datatrove's JSON lines, NAME.jsonl.gz ({\"text\", \"id\", "
                           "\"metadata\"}, textmill's other columns in the metadata). The next stage reads either; "
                           "switching back and forth runs nothing again")
        add_arguments(p, config, **options)
        # A dump is streamed whole, a URL list or an archive cut by its own setting; a crawl's HTML lies beside it.
        if name not in ("reddit-urls", "blacklist", "warc", "extract"):
            add_arguments(p, InputConfig)
        return p

    docs = ("document shards (Parquet from an earlier stage, or loose JSON lines with a 'text' field), or directories of "
            "them; a file of more than --documents-per-shard documents is cut into units of that many")

    p = stage("reddit-urls", "Reddit submission dumps to URL lists by OpenWebText's rules: every link post with a "
              "score of at least --min-score, one JSON-lines list per dump (url, submission_id, score, subreddit, "
              "created_utc), which `textmill blacklist` takes as it takes any list.",
              "Pushshift submission dumps (RS_YYYY-MM.zst, including those written with zstd --long=31; .gz, .bz2, "
              ".xz; or JSON lines) or directories of them; each is read as a stream, a task of its own",
              RedditConfig, help_for={"subreddits": "take links from this subreddit only (any case; repeatable)",
                                      "exclude_subreddits": "never take links from this subreddit (any case; "
                                      "repeatable)"})
    p.set_defaults(func=cmd_reddit_urls)

    p = stage("blacklist", "Filter URL lists: malformed, non-http(s), too short, blacklisted domain or extension, duplicate.",
              "URL lists (.txt, one URL a line; .jsonl, a {\"url\": ...} object a line, its other fields kept as "
              "the URL's metadata; either compressed as .gz, .bz2, .xz) or directories of them; each is cut into "
              "shards of at most --urls-per-shard URLs",
              BlacklistConfig, help_for={"domain_blacklist": "a file of extra domain labels to block, one a line (adds to "
                                     "the bundled list; repeatable)",
                                     "extension_blacklist": "a file of extra file extensions to block, one a line (adds "
                                     "to the bundled list; repeatable)"})
    p.set_defaults(func=cmd_blacklist)

    p = stage("scrape", f"Fetch every URL of the URL shards and extract title and text (with {ScrapeConfig().extractor} "
              "unless --extractor says otherwise).",
              "URL shards written by `textmill blacklist`, or directories of them", ScrapeConfig,
              help_for={"allow_networks": "fetch from this non-public address or network all the same, e.g. a local mirror "
                    "at 10.0.0.5 or 127.0.0.2/32 (repeatable; narrower than --allow-private-addresses)"})
    p.set_defaults(func=cmd_scrape)

    fetching = ("concurrency", "timeout_s", "max_bytes", "max_redirects", "allow_private_addresses", "allow_networks",
                "keep_html", "user_agent")
    p = stage("warc", "Read the pages of web archives (WARC files: Common Crawl's, a crawler's) into the document "
              "shards a scrape writes: each HTML response extracted as a fetched page is, fetching nothing.",
              "web archives (.warc.gz, .warc) or directories of them; each is cut into shards of at most "
              "--responses-per-shard pages", WarcConfig)
    add_arguments(p, ScrapeConfig, skip=tuple(f.name for f in fields(ScrapeConfig) if f.name not in EXTRACTION_SETTINGS))
    p.set_defaults(func=cmd_warc)

    p = stage("extract", "Extract title and text again from the HTML a scrape kept (--keep-html), fetching nothing: to "
              "switch extractors on an existing crawl.", "scraped shards (with their .html/NAME.parquet), or directories "
              "of them", ScrapeConfig, skip=fetching)
    p.set_defaults(func=cmd_extract)

    p = stage("dedup", "Remove near-duplicate documents with MinHash LSH; the first document of each cluster stays.", docs,
              DedupConfig)
    p.set_defaults(func=cmd_dedup)

    p = stage("clean", "Fix mojibake with ftfy, keep one language (fastText's lid.176, or seeded langdetect), drop short "
              "documents.", docs, CleanConfig)
    add_tokenizer_files(p, "count exact BPE tokens (default: a lower bound that needs no vocabulary)")
    p.set_defaults(func=cmd_clean)

    p = stage("quality", "Reject low-quality documents by Gopher's, C4's or FineWeb's rules, each rule a reject reason "
              "(C4's line rules also drop lines). A threshold of 0 turns its rule off.", docs, QualityConfig)
    p.set_defaults(func=cmd_quality)

    p = stage("shuffle", "Shuffle all documents globally with a seed, out of core, into N shards.", docs, ShuffleConfig)
    p.set_defaults(func=cmd_shuffle)

    p = stage("decontaminate", "Cut evaluation-set n-gram overlaps (e.g. LAMBADA) out of training documents.", docs,
              DecontaminateConfig, help_for={"eval_files": "an evaluation set as JSON lines with a 'text' field, e.g. "
                                         "lambada_test.jsonl (repeatable; at least one)"})
    p.set_defaults(func=cmd_decontaminate)
