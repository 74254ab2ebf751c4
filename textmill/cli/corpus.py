"""`textmill blacklist | scrape | dedup | clean | shuffle | decontaminate`: each corpus stage on its own,
over shards or loose JSON lines, ending with a one-line summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from textmill.cli.options import ArgumentDefaults, Timer, add_tokenizer_files, gpt2_tokenizer
from textmill.errors import TextmillError
from textmill.pipeline.config import (BlacklistConfig, CleanConfig, DecontaminateConfig, DedupConfig, ScrapeConfig,
                                      ShuffleConfig)
from textmill.settings import add_arguments, from_namespace


def summary_line(stage: str, manifests: list[dict], output: Path, seconds: float) -> str:
    from textmill.report.lines import stage_line, stage_summary

    return stage_line(stage_summary(stage, manifests, output, seconds))


def cmd_blacklist(args) -> str:
    from textmill.pipeline.blacklist import UrlRules, blacklist_files

    timer = Timer()
    config = from_namespace(BlacklistConfig, args)
    manifests = blacklist_files(args.inputs, Path(args.output), UrlRules.with_extra(config), config.duplicate_partitions)
    return summary_line("blacklist", manifests, Path(args.output), timer.seconds)


def cmd_scrape(args) -> str:
    from textmill.pipeline.scrape import scrape_shards
    from textmill.pipeline.shards import list_shards

    timer = Timer()
    manifests = scrape_shards(list_shards(args.inputs), Path(args.output), from_namespace(ScrapeConfig, args))
    return summary_line("scrape", manifests, Path(args.output), timer.seconds)


def cmd_dedup(args) -> str:
    from textmill.pipeline.dedup import dedup_shards
    from textmill.pipeline.shards import list_shards
    from textmill.report.lines import dedup_line

    timer = Timer()
    manifests, clusters = dedup_shards(list_shards(args.inputs), Path(args.output), from_namespace(DedupConfig, args))
    return summary_line("dedup", manifests, Path(args.output), timer.seconds) + "\n" + dedup_line(clusters)


def cmd_clean(args) -> str:
    from textmill.pipeline.clean import clean_shards
    from textmill.pipeline.shards import list_shards

    timer = Timer()
    manifests = clean_shards(list_shards(args.inputs), Path(args.output), from_namespace(CleanConfig, args),
                             gpt2_tokenizer(args))
    return summary_line("clean", manifests, Path(args.output), timer.seconds)


def cmd_shuffle(args) -> str:
    from textmill.pipeline.shards import list_shards
    from textmill.pipeline.shuffle import empty_shards_note, shard_count, shuffle_shards

    timer = Timer()
    config = from_namespace(ShuffleConfig, args)
    shards = list_shards(args.inputs)
    count = config.num_shards or shard_count(sum(p.stat().st_size for p in shards), config.target_shard_mb)
    manifests = shuffle_shards(shards, Path(args.output), count, config.seed)
    if empty_shards_note(manifests):
        print(f"textmill: {empty_shards_note(manifests)}", file=sys.stderr)
    return summary_line("shuffle", manifests, Path(args.output), timer.seconds)


def cmd_decontaminate(args) -> str:
    from textmill.pipeline.decontaminate import decontaminate_shards
    from textmill.pipeline.shards import list_shards
    from textmill.report.lines import decontaminate_line

    timer = Timer()
    config = from_namespace(DecontaminateConfig, args)
    if not config.eval_files:
        raise TextmillError("give the evaluation sets to cut out: --eval-files FILE (repeatable)")
    manifests, info = decontaminate_shards(list_shards(args.inputs), Path(args.output), config)
    return (summary_line("decontaminate", manifests, Path(args.output), timer.seconds) + "\n"
            + decontaminate_line(info, config.key_threshold))


def add_parsers(sub) -> None:
    """One command per stage; its options are the fields of the stage's config (textmill.pipeline.config)."""

    def stage(name: str, help: str, inputs_help: str, config: type, **options) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, formatter_class=ArgumentDefaults)
        p.add_argument("inputs", nargs="+", metavar="INPUT", help=inputs_help)
        p.add_argument("--output", "-o", required=True, help="output directory: one shard per input shard, with rejects and a manifest")
        add_arguments(p, config, **options)
        return p

    docs = "document shards (Parquet from an earlier stage, or loose JSON lines with a 'text' field), or directories of them"

    p = stage("blacklist", "Filter URL lists: malformed, non-http(s), too short, blacklisted domain or extension, duplicate.",
              "URL lists (.txt, .gz, .bz2, .xz; one URL a line) or directories of them; each file becomes one shard",
              BlacklistConfig, help_for={"domain_blacklist": "a file of extra domain labels to block, one a line (adds to "
                                     "the bundled list; repeatable)",
                                     "extension_blacklist": "a file of extra file extensions to block, one a line (adds "
                                     "to the bundled list; repeatable)"})
    p.set_defaults(func=cmd_blacklist)

    p = stage("scrape", "Fetch every URL of the URL shards and extract title and text with newspaper3k.",
              "URL shards written by `textmill blacklist`, or directories of them", ScrapeConfig,
              help_for={"allow_networks": "fetch from this non-public address or network all the same, e.g. a local mirror "
                    "at 10.0.0.5 or 127.0.0.2/32 (repeatable; narrower than --allow-private-addresses)"})
    p.set_defaults(func=cmd_scrape)

    p = stage("dedup", "Remove near-duplicate documents with MinHash LSH; the first document of each cluster stays.", docs,
              DedupConfig)
    p.set_defaults(func=cmd_dedup)

    p = stage("clean", "Fix mojibake with ftfy, keep one language (seeded langdetect), drop short documents.", docs,
              CleanConfig)
    add_tokenizer_files(p, "count exact BPE tokens (default: a lower bound that needs no vocabulary)")
    p.set_defaults(func=cmd_clean)

    p = stage("shuffle", "Shuffle all documents globally with a seed, out of core, into N shards.", docs, ShuffleConfig)
    p.set_defaults(func=cmd_shuffle)

    p = stage("decontaminate", "Cut evaluation-set n-gram overlaps (e.g. LAMBADA) out of training documents.", docs,
              DecontaminateConfig, help_for={"eval_files": "an evaluation set as JSON lines with a 'text' field, e.g. "
                                         "lambada_test.jsonl (repeatable; at least one)"})
    p.set_defaults(func=cmd_decontaminate)
