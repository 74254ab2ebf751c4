"""Reddit submission dumps for the demo, the tests and the benchmarks, in Pushshift's schema and compressed as the
real ones are (`zstd --long=31`: a frame that declares a 2 GiB window), linking to given URLs: seeded, with what
OpenWebText's rules leave out among them (self posts, scores under 3, NSFW submissions, links only such submissions
make) and links submitted again in a later month."""

from __future__ import annotations

import bz2
import gzip
import json
import random
from pathlib import Path
from urllib.parse import urlsplit

SUBREDDITS = ("news", "worldnews", "science", "technology", "books", "history")


def submissions(urls: list[str], months: tuple[str, ...], seed: int,
                left_out: tuple[str, ...] = ()) -> dict[str, list[dict]]:
    """Each month's submissions: every URL of `urls` linked by a submission OpenWebText's rules keep (a link post
    with a score from 3 to 40), in a month of its own, one in ten of them linked again (by a submission the rules
    keep or by one they leave out: a score under 3, or marked over 18); every URL of `left_out` linked only by
    submissions they leave out; and self posts between them."""
    rng = random.Random(seed)
    by_month: dict[str, list[dict]] = {month: [] for month in months}

    def submit(url: str | None, month: str, taken: bool) -> None:
        row = _submission(rng, month, len(by_month[month]), url)
        if url is not None and not taken:  # what the rules leave out: marked over 18, or a low score
            if rng.random() < 0.3:
                row["over_18"] = True
            else:
                row["score"] = rng.choice([-2, 0, 1, 2])
        by_month[month].append(row)

    for number, url in enumerate([*urls, *left_out]):
        month = months[number % len(months)]
        submit(url, month, number < len(urls))
        if rng.random() < 0.1:  # submitted again: kept again half the time (the blacklist's duplicate)
            submit(url, months[(number + 1) % len(months)], number < len(urls) and rng.random() < 0.5)
        if rng.random() < 0.2:
            submit(None, month, False)
    return by_month


def _submission(rng: random.Random, month: str, number: int, url: str | None) -> dict:
    """One submission as Pushshift writes it: a link post to `url`, or a self post (url None)."""
    year, month_number = (int(part) for part in month.split("-"))
    created = 1_293_840_000 + (year - 2011) * 31_536_000 + (month_number - 1) * 2_592_000 + number * 37
    post_id = f"{year % 100:02d}{month_number:02d}{number:05x}"
    subreddit = rng.choice(SUBREDDITS)
    return {
        "id": post_id, "name": f"t3_{post_id}", "author": f"user{rng.randrange(10_000)}", "subreddit": subreddit,
        "title": f"Submission {post_id}", "is_self": url is None, "over_18": False,
        "url": url or f"https://www.reddit.com/r/{subreddit}/comments/{post_id}/",
        "domain": urlsplit(url).hostname or "" if url else f"self.{subreddit}", "score": rng.randint(3, 40),
        "num_comments": rng.randrange(200), "permalink": f"/r/{subreddit}/comments/{post_id}/",
        # Pushshift wrote created_utc as a number in some months and as a string in others.
        "created_utc": str(created) if month_number % 2 == 0 else created,
        "selftext": "" if url else "A text post, which links nowhere.",
    }


def write_dump(rows: list[dict], path: Path) -> Path:
    """Rows as a dump, a JSON object a line, compressed by the name's suffix: .zst as `zstd --long=31` writes a
    month, .gz, .bz2, or plain JSON lines."""
    data = b"".join(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n" for row in rows)
    if path.suffix == ".zst":
        from backports import zstd

        options = {zstd.CompressionParameter.compression_level: 3, zstd.CompressionParameter.window_log: 31,
                   zstd.CompressionParameter.enable_long_distance_matching: True}
        compressor = zstd.ZstdCompressor(options=options)  # streamed: a one-shot write would fit the window to the data
        path.write_bytes(compressor.compress(data) + compressor.flush())
    else:
        path.write_bytes({".gz": lambda d: gzip.compress(d, mtime=0), ".bz2": bz2.compress}.get(path.suffix, bytes)(data))
    return path


def write_dumps(urls: list[str], folder: Path, months: tuple[str, ...] = ("2011-01", "2011-02"), seed: int = 0,
                suffix: str = ".zst", left_out: tuple[str, ...] = ()) -> list[Path]:
    """RS_<month><suffix> in `folder` for each month, linking to `urls` and `left_out` (submissions); the files,
    in order."""
    folder.mkdir(parents=True, exist_ok=True)
    return [write_dump(rows, folder / f"RS_{month}{suffix}")
            for month, rows in submissions(urls, months, seed, left_out).items()]
