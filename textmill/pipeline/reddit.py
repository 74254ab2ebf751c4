"""Reddit submissions to the outbound links an OpenWebText-style corpus starts from.

OpenWebText took every outbound link of a Reddit submission with a score (karma) of at least 3; OpenWebText2 did
the same from Pushshift's dumps. Those are monthly files of submissions, `RS_YYYY-MM.zst`, one JSON object a line
(`id`, `url`, `is_self`, `score`, `subreddit`, `over_18`, `created_utc`, ...), compressed with zstd and, for the newer
months, a window of up to 2 GiB (`zstd --long=31`), which a decompressor must be allowed to use. A month is tens of
GB decompressed: it is read as a stream, a line at a time, never whole. A month written with a long window needs
that window's memory to be read, as zstd's own tool does (up to 2 GiB: 544 MB for a 520 MB month written with
window_log 31, 112 MB for the same month with zstd's default window, measured), whatever reads it.

A submission gives its link when it is a link post (`is_self` not true) to an http(s) URL, its score is at least
`min_score`, its subreddit is among `subreddits` (when that is not empty) and not among `exclude_subreddits`, and,
unless `nsfw`, it is not marked over 18. Otherwise it is a counted reject with its reason. `created_utc` is an
integer in some months and a string or a float in others: each becomes whole seconds (-1 when missing). A score or
a time that is a number no column holds (10**30, infinity, NaN) is a counted reject (`bad_score`, `bad_time`).
Pushshift stored URLs as HTML text (`&amp;` for `&`): they are unescaped (`unescape_urls`; OpenWebText took them as
they were), and the manifest counts how many changed (`urls_unescaped`).

A dump's links are a URL list in JSON lines (NAME.jsonl: `url`, `submission_id`, `score`, `subreddit`,
`created_utc`), which the blacklist cuts into units like any list and whose other fields become each URL's
metadata. Its rejects keep the same fields, where the submission had them, its line and the reason (not the whole
submission: a month's rejects would be the size of the month).
"""

from __future__ import annotations

import functools
import html
import lzma
import math
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import pyarrow as pa

from textmill.errors import TextmillError
from textmill.io.files import bounded_lines, parsed_line
from textmill.io.progress import progress
from textmill.pipeline.shards import ShardOutput
from textmill.pipeline.stage_configs import RedditConfig
from textmill.pipeline.units import OPENERS

ZSTD_MAX_WINDOW_LOG = 31  # zstd --long=31, Pushshift's newer months
MAX_SUBMISSION_BYTES = 1 << 20  # a submission's line; Pushshift's are a few KB

LINK_SCHEMA = pa.schema([("url", pa.string()), ("submission_id", pa.string()), ("score", pa.int64()),
                         ("subreddit", pa.string()), ("created_utc", pa.int64()), ("source", pa.string())])


@dataclass(frozen=True)
class Link:
    """An outbound link and the submission it came from: a line of the URL list a dump gives."""

    url: str
    submission_id: str
    score: int
    subreddit: str
    created_utc: int


def dump_name(path: Path) -> str:
    """RS_2011-01.zst -> RS_2011-01: a dump's name, its URL list's."""
    from textmill.pipeline.shards import safe_shard_name

    name = path.name
    for suffix in (".zst", *OPENERS, ".jsonl", ".json", ".ndjson"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return safe_shard_name(name)


@contextmanager
def open_dump(path: Path) -> Iterator[BinaryIO]:
    """A dump's decompressed bytes as a stream: .zst (any window up to 2 GiB; frames one after another), .gz, .bz2,
    .xz, or plain. Each read decompresses at most what it asks for (a 4 GiB line packed into 131 KB is never held
    whole), and a file that ends inside a frame is an error (EOFError), not a shorter month."""
    if path.suffix == ".zst":
        from backports import zstd

        with zstd.open(path, "rb", options={zstd.DecompressionParameter.window_log_max: ZSTD_MAX_WINDOW_LOG}) as stream:
            yield stream
    elif path.suffix in OPENERS:
        with OPENERS[path.suffix](path, "rb") as stream:
            yield stream
    else:
        with open(path, "rb") as stream:
            yield stream


def fits_int64(value: object) -> bool:
    """Whether a dump's number fits the URL list's int64 columns (a bool is no number here)."""
    return isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < (1 << 63)


def _whole_seconds(value: object) -> int | None | str:
    """created_utc as whole seconds: an integer, a number or a numeric string (Pushshift wrote each in some month);
    None when it is missing or not a number at all (-1 in the list, as before); "bad_time" when it is a number that
    is no time (infinite, NaN, or past the int64 range)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None  # a month's string that is not a number: unknown, as a missing one
    if isinstance(value, float):
        if not math.isfinite(value):
            return "bad_time"
        value = int(value)
    if not isinstance(value, int):
        return None
    return value if fits_int64(value) else "bad_time"


@functools.lru_cache(maxsize=8)
def _lowered(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(name.lower() for name in names)


def judge(record: object, rules: RedditConfig) -> tuple[Link | None, str | None]:
    """(the submission's link, None), or (None, the reason it gives none)."""
    if not isinstance(record, dict):
        return None, "not_an_object"
    if record.get("is_self") is True:
        return None, "self_post"
    url = record.get("url")
    if not isinstance(url, str) or not url.strip().lower().startswith(("http://", "https://")):
        return None, "no_link"
    score = record.get("score")
    if score is None or isinstance(score, bool):
        return None, "no_score"
    if not fits_int64(score):  # a float, a string, a number of 5,000 digits
        return None, "bad_score"
    if score < rules.min_score:
        return None, "low_score"
    subreddit = record.get("subreddit")
    subreddit = subreddit if isinstance(subreddit, str) else ""
    if rules.subreddits and subreddit.lower() not in _lowered(rules.subreddits):
        return None, "subreddit_not_listed"
    if subreddit.lower() in _lowered(rules.exclude_subreddits):
        return None, "subreddit_excluded"
    if record.get("over_18") is True and not rules.nsfw:
        return None, "nsfw"
    created = _whole_seconds(record.get("created_utc"))
    if created == "bad_time":
        return None, "bad_time"
    if rules.unescape_urls and "&" in url:  # Pushshift escaped a URL as HTML text: &amp; for &
        url = html.unescape(url)
    return Link(url.strip(), str(record.get("id", "")), score, subreddit, -1 if created is None else created), None


def _rejected_fields(record: object) -> dict:
    """What a reject keeps of its submission: the link's fields, where they have their types."""
    record = record if isinstance(record, dict) else {}

    def typed(key: str, kind: type):
        value = record.get(key)
        return value if isinstance(value, kind) and not isinstance(value, bool) else None

    score, created = record.get("score"), _whole_seconds(record.get("created_utc"))
    return {"url": typed("url", str), "submission_id": typed("id", str), "score": score if fits_int64(score) else None,
            "subreddit": typed("subreddit", str), "created_utc": created if isinstance(created, int) else None}


def zstd_error() -> type[Exception]:
    from backports import zstd

    return zstd.ZstdError


def reddit_links(dump: Path, output: Path, rules: RedditConfig) -> dict:
    """The links of one submission dump into the JSON-lines URL list `output` (NAME.jsonl), its rejects and
    manifest beside it (textmill.pipeline.shards); returns the manifest. Memory: a line and a batch of rows."""
    lines = unescaped = 0
    with open_dump(dump) as stream, ShardOutput("reddit-urls", output, LINK_SCHEMA, [dump], rules.params()) as stage, \
            progress(desc=f"reddit-urls {dump.name}", unit="submission") as shown:
        try:
            for lineno, (raw, too_large) in enumerate(bounded_lines(stream, MAX_SUBMISSION_BYTES), 1):
                if not raw.strip():
                    continue
                lines += 1
                record, reason = (None, "too_large") if too_large else parsed_line(raw)
                link, reason = (None, reason) if reason else judge(record, rules)
                if link is not None:
                    unescaped += rules.unescape_urls and link.url != record["url"].strip()
                    stage.keep(vars(link))  # dataclasses.asdict copied each field deeply: a third of the time
                else:
                    stage.reject({**_rejected_fields(record), "source": f"{dump.name}:{lineno}"}, reason)
                shown.update(1)
        except (OSError, EOFError, lzma.LZMAError, zlib.error, zstd_error()) as exc:
            raise TextmillError(f"cannot read {dump}: {exc}") from None
        return stage.finish(lines, **({"urls_unescaped": unescaped} if rules.unescape_urls else {}))
