"""Pushshift submission dumps, generated in their schema and compressed as the real ones are, read as streams and
judged by OpenWebText's rules."""

import bz2
import gzip
import io
import json
import random

import pytest
import zstandard

from textmill.pipeline.reddit import Link, SubmissionRules, judge, open_dump, submission_links


def submissions(seed: int, count: int) -> list[dict]:
    """Submissions as Pushshift writes them: link and self posts, scores around the threshold, NSFW ones, a few
    subreddits, created_utc as an integer, a string or a float (as different months have it)."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        self_post = rng.random() < 0.2
        created = 1_300_000_000 + i
        rows.append({
            "id": f"t{i:05x}", "score": rng.randint(-2, 9), "is_self": self_post, "over_18": rng.random() < 0.1,
            "subreddit": rng.choice(["news", "AskReddit", "science", "pics"]),
            "url": f"https://www.reddit.com/r/x/comments/{i}/" if self_post else f"http://site{i % 50}.example/{i}",
            "created_utc": rng.choice([created, str(created), float(created)]), "domain": "site.example",
            "title": "a title ☃", "permalink": f"/r/x/comments/{i}/",
        })
    return rows


def as_lines(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(row, ensure_ascii=False).encode() + b"\n" for row in rows)


def write_zst_long(path, data: bytes) -> None:
    """As `zstd --long=31` writes a month: a frame that declares a 2 GiB window and no content size."""
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=31, enable_ldm=True)
    with open(path, "wb") as f, zstandard.ZstdCompressor(compression_params=params).stream_writer(f) as writer:
        writer.write(data)


def test_a_long_window_month_is_read_as_a_stream_the_default_decompressor_refuses(tmp_path):
    data = as_lines(submissions(1, 3000))
    path = tmp_path / "RS_2019-01.zst"
    write_zst_long(path, data)
    assert zstandard.get_frame_parameters(path.read_bytes()).window_size == 1 << 31
    with pytest.raises(zstandard.ZstdError, match="too much memory"):
        zstandard.ZstdDecompressor().stream_reader(io.BytesIO(path.read_bytes())).read()
    with open_dump(path) as stream:
        assert list(stream) == data.splitlines(keepends=True)


@pytest.mark.parametrize("suffix, write", [(".gz", gzip.compress), (".bz2", bz2.compress), (".jsonl", bytes)])
def test_other_compressions_and_plain_json_lines_read_the_same(tmp_path, suffix, write):
    data = as_lines(submissions(2, 200))
    path = tmp_path / f"RS_2011-05{suffix}"
    path.write_bytes(write(data))
    with open_dump(path) as stream:
        assert stream.read() == data


def test_openwebtexts_rules_keep_link_posts_of_score_three_and_up():
    rows = submissions(3, 2000)
    verdicts = list(submission_links(as_lines(rows).splitlines(), SubmissionRules()))
    assert len(verdicts) == len(rows)
    for row, (link, reason) in zip(rows, verdicts, strict=True):
        expected = ("self_post" if row["is_self"] else "low_score" if row["score"] < 3 else
                    "nsfw" if row["over_18"] else None)
        assert reason == expected
        if reason is None:
            assert link == Link(row["url"], row["id"], row["score"], row["subreddit"], int(float(row["created_utc"])))
    kept = sum(reason is None for _, reason in verdicts)
    assert 0 < kept < len(rows)


def test_subreddit_filters_nsfw_and_bad_records_are_counted_rejects():
    rules = SubmissionRules(min_score=0, subreddits=frozenset({"news", "science"}),
                            exclude_subreddits=frozenset({"science"}), nsfw=True)
    link = {"id": "a", "url": "https://example.com/", "score": 5, "is_self": False, "subreddit": "News", "over_18": True,
            "created_utc": "1300000000.0"}
    assert judge(link, rules) == (Link("https://example.com/", "a", 5, "News", 1_300_000_000), None)
    assert judge({**link, "subreddit": "Science"}, rules) == (None, "subreddit_excluded")
    assert judge({**link, "subreddit": "pics"}, rules) == (None, "subreddit_not_listed")
    assert judge({**link, "over_18": True}, SubmissionRules()) == (None, "nsfw")
    assert judge({**link, "score": None}, rules) == (None, "no_score")
    assert judge({**link, "score": True}, rules) == (None, "no_score")
    assert judge({**link, "url": "ftp://example.com/"}, rules) == (None, "no_link")
    assert judge({**link, "url": ""}, rules) == (None, "no_link")
    assert judge({**link, "created_utc": "yesterday"}, rules)[0].created_utc == -1
    assert judge([link], rules) == (None, "not_an_object")
    lines = [b"{not json", b"\xff\xfe", b"", json.dumps(link).encode()]
    assert [reason for _, reason in submission_links(lines, rules)] == ["invalid_json", "invalid_json", None]
