"""Pages from web archives: the HTML responses of WARC files (Common Crawl's, `wget --warc-file`'s, Heritrix's,
browsertrix's) into the document shards the live scrape writes, so that dedup and every stage after it are
unchanged. Read with FastWARC (benchmarks/README.md measures it beside warcio, which datatrove uses).

A unit is a range of whole records of one file (textmill.pipeline.units.warc_units: at most `responses_per_shard`
responses each, cut once per file and machine, every record checked whole). Each response record is a record of
the stage: a page is kept or rejected as the scrape would keep or reject it once fetched: `status=<code>` for
another status than 200, `content_type=<type>` for what is not HTML, `too_large` for a body (after undoing its
transfer and content encodings) over `max_bytes`, `binary_content`, `bad_url`, and the extractor's reasons;
decoded and extracted by the same code (textmill.pipeline.scrape.extracted). A document's id is its normalised
URL's, as a fetched one's (two captures of one URL are duplicates by id in dedup); `fetched_at` is the record's
WARC-Date; its metadata names the archive file and the record (`warc_file`, `warc_record_id`). Other records
(requests, metadata, revisits, warcinfo) are counted in the manifest by type, not taken.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from textmill.errors import TextmillError
from textmill.io.progress import progress
from textmill.pipeline.blacklist import normalize_url, url_id
from textmill.pipeline.archive import archived_response
from textmill.pipeline.scrape import extracted, extraction_pool, looks_binary, ordered_map, write_extracted
from textmill.pipeline.shards import DOC_SCHEMA, ShardOutput
from textmill.pipeline.stage_configs import EXTRACTION_SETTINGS, ScrapeConfig
from textmill.pipeline.units import WarcUnit


def extraction_params(cfg: ScrapeConfig) -> dict:
    """What of [scrape] changes the documents an archive gives: its extraction's keyed settings."""
    return {name: value for name, value in cfg.params().items() if name in EXTRACTION_SETTINGS}


class _Records:
    """The records of one unit: its responses as documents to extract, the other records counted by type."""

    def __init__(self, unit: WarcUnit, max_bytes: int):
        self.unit, self.max_bytes = unit, max_bytes
        self.others: Counter[str] = Counter()
        self.read = 0

    def __iter__(self) -> Iterator[tuple[dict, str | None, bytes | None, str | None]]:
        from fastwarc.warc import ArchiveIterator, WarcRecordType

        end = self.unit.offset + self.unit.size
        try:
            with open(self.unit.path, "rb") as f:
                f.seek(self.unit.offset)
                for record in ArchiveIterator(f, parse_http=False, fsspec_args=False, quirks_mode=True):
                    if record.stream_pos >= end:
                        break
                    self.read += 1
                    if record.record_type != WarcRecordType.response:
                        self.others[str(record.record_type)] += 1
                        continue
                    yield self.page(record)
        except OSError as exc:
            raise TextmillError(f"cannot read {self.unit.path} as WARC ({self.unit.shown()}): {exc}") from None
        if self.read != self.unit.records:
            raise TextmillError(f"{self.unit.path} changed while it was being read ({self.unit.shown()}: "
                                f"{self.read} records); run again")

    def page(self, record) -> tuple[dict, str | None, bytes | None, str | None]:
        target = record.headers.get("WARC-Target-URI", "").strip("<>")
        url, reason = normalize_url(target)
        row = {"id": url_id(url) if url else None, "url": url or target, "final_url": url or target,
               "domain": urlsplit(url).hostname if url else None, "status": None, "title": None, "text": None,
               "word_count": None, "elapsed_s": None, "fetched_at": record.headers.get("WARC-Date"),
               "metadata": json.dumps({"warc_file": self.unit.path.name, "warc_record_id": record.record_id})}
        if reason:
            return row, "bad_url", None, None
        got = archived_response(record, url, self.max_bytes)
        row["status"] = got.status
        if got.reason:
            return row, got.reason, None, None
        if looks_binary(got.body):
            return row, "binary_content", None, None
        return row, None, got.body, got.content_type


def warc_shard(unit: WarcUnit, output: Path, cfg: ScrapeConfig) -> dict:
    """The response records of one unit of a WARC file into the document shard `output`, extracted by
    `cfg.extractor` in `cfg.extract_workers` processes as the scrape extracts; returns its manifest."""
    records = _Records(unit, cfg.max_bytes)

    def extract(item: tuple[dict, str | None, bytes | None, str | None]) -> tuple[dict, str | None, str | None]:
        row, reason, body, content_type = item
        if reason:
            return row, reason, None
        fields, reason, charset = extracted(pool, row["final_url"], body, content_type, cfg.extractor)
        return {**row, **fields}, reason, charset

    workers = max(cfg.extract_workers, 1)
    with extraction_pool(cfg) as pool, ThreadPoolExecutor(workers) as threads, \
            ShardOutput("warc", output, DOC_SCHEMA, [], extraction_params(cfg)) as stage, \
            progress(records, desc=f"warc {unit.shown()}", unit="response", leave=False) as counted:
        # The unit's responses counted as they are read: one big archive is not `0 of 1 task` until its end.
        count, charsets = write_extracted(stage, ordered_map(threads, extract, counted, 4 * workers))
        return stage.finish(count, unit=unit.record(), other_records=dict(sorted(records.others.items())),
                            charsets=charsets)
