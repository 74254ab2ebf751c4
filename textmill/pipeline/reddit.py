"""Reddit submissions to the outbound links an OpenWebText-style corpus starts from.

OpenWebText took every outbound link of a Reddit submission with a score (karma) of at least 3; OpenWebText2 did
the same from Pushshift's dumps. Those are monthly files of submissions, `RS_YYYY-MM.zst`, one JSON object a line
(`id`, `url`, `is_self`, `score`, `subreddit`, `over_18`, `created_utc`, ...), compressed with zstd and, for the newer
months, a window of up to 2 GiB (`zstd --long=31`), which a decompressor must be allowed to use. A month is tens of
GB decompressed: it is read as a stream, a line at a time, never whole.

A submission gives its link when it is a link post (`is_self` false) to an http(s) URL, its score is at least
`min_score`, its subreddit is among `subreddits` (when that is not empty) and not among `exclude_subreddits`, and,
unless `nsfw`, it is not marked over 18. Otherwise it is a counted reject with its reason. `created_utc` is an
integer in some months and a string or a float in others: each becomes whole seconds.
"""

from __future__ import annotations

import io
import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from textmill.pipeline.units import OPENERS

ZSTD_MAX_WINDOW = 1 << 31  # zstd --long=31, Pushshift's newer months
_READ_BYTES = 1 << 20


@dataclass(frozen=True)
class SubmissionRules:
    min_score: int = 3
    subreddits: frozenset[str] = frozenset()  # lower-cased; empty: every subreddit
    exclude_subreddits: frozenset[str] = frozenset()
    nsfw: bool = False


@dataclass(frozen=True)
class Link:
    """An outbound link and the submission it came from."""

    url: str
    id: str
    score: int
    subreddit: str
    created_utc: int


@contextmanager
def open_dump(path: Path) -> Iterator[BinaryIO]:
    """A dump's decompressed bytes as a stream: .zst (any window up to 2 GiB), .gz, .bz2, .xz, or plain."""
    if path.suffix == ".zst":
        import zstandard

        with open(path, "rb") as raw:
            reader = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).stream_reader(raw, _READ_BYTES)
            with io.BufferedReader(reader, _READ_BYTES) as stream:
                yield stream
    elif path.suffix in OPENERS:
        with OPENERS[path.suffix](path, "rb") as stream:
            yield stream
    else:
        with open(path, "rb") as stream:
            yield stream


def _whole_seconds(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value))
        except ValueError:
            return None
    return None


def judge(record: object, rules: SubmissionRules) -> tuple[Link | None, str | None]:
    """(the submission's link, None), or (None, the reason it gives none)."""
    if not isinstance(record, dict):
        return None, "not_an_object"
    if record.get("is_self") is True:
        return None, "self_post"
    url = record.get("url")
    if not isinstance(url, str) or not url.strip().lower().startswith(("http://", "https://")):
        return None, "no_link"
    score = record.get("score")
    if not isinstance(score, int) or isinstance(score, bool):
        return None, "no_score"
    if score < rules.min_score:
        return None, "low_score"
    subreddit = record.get("subreddit")
    subreddit = subreddit if isinstance(subreddit, str) else ""
    if rules.subreddits and subreddit.lower() not in rules.subreddits:
        return None, "subreddit_not_listed"
    if subreddit.lower() in rules.exclude_subreddits:
        return None, "subreddit_excluded"
    if record.get("over_18") is True and not rules.nsfw:
        return None, "nsfw"
    created = _whole_seconds(record.get("created_utc"))
    return Link(url.strip(), str(record.get("id", "")), score, subreddit, -1 if created is None else created), None


def submission_links(lines: Iterable[bytes], rules: SubmissionRules) -> Iterator[tuple[Link | None, str | None]]:
    """Each line's verdict (judge), a line that is not JSON rejected as invalid_json; blank lines pass unseen."""
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            yield None, "invalid_json"
            continue
        yield judge(record, rules)
