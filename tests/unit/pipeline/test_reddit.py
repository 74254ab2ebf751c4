"""Pushshift submission dumps, generated in their schema and compressed as the real ones are, read as streams and
judged by OpenWebText's rules into JSON-lines URL lists with their rejects and manifests."""

import bz2
import gzip
import io
import json

import pyarrow.parquet as pq
import pytest
import zstandard

from textmill.demo.reddit import submissions, write_dump
from textmill.errors import TextmillError
from textmill.pipeline.reddit import Link, judge, open_dump, reddit_links
from textmill.pipeline.shards import manifest_path, rejects_path
from textmill.pipeline.stage_configs import RedditConfig

URLS = [f"http://site{i % 50}.example/{i}" for i in range(1500)]


def month(seed: int = 1) -> list[dict]:
    return submissions(URLS, ("2011-01", "2011-02"), seed)["2011-02"]


def as_lines(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(row, ensure_ascii=False).encode() + b"\n" for row in rows)


def test_a_long_window_month_is_read_as_a_stream_the_default_decompressor_refuses(tmp_path):
    rows = month()
    path = write_dump(rows, tmp_path / "RS_2011-02.zst")
    assert zstandard.get_frame_parameters(path.read_bytes()).window_size == 1 << 31
    with pytest.raises(zstandard.ZstdError, match="too much memory"):
        zstandard.ZstdDecompressor().stream_reader(io.BytesIO(path.read_bytes())).read()
    with open_dump(path) as stream:
        assert stream.read() == as_lines(rows)


def test_frames_written_one_after_another_read_as_one_stream(tmp_path):
    path = tmp_path / "RS_2011-03.zst"
    path.write_bytes(b"".join(zstandard.ZstdCompressor().compress(as_lines(month(seed))) for seed in (1, 2)))
    with open_dump(path) as stream:
        assert stream.read() == as_lines(month(1)) + as_lines(month(2))


@pytest.mark.parametrize("suffix", [".zst", ".gz", ".bz2"])
def test_a_dump_cut_short_is_one_error_and_leaves_no_list(tmp_path, suffix):
    whole = write_dump(month(), tmp_path / f"whole{suffix}").read_bytes()
    cut = tmp_path / f"RS_2011-02{suffix}"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    output = tmp_path / "out" / "RS_2011-02.jsonl"
    with pytest.raises(TextmillError, match="cannot read"):
        reddit_links(cut, output, RedditConfig())
    assert not output.exists() and not manifest_path(output).exists() and not rejects_path(output).exists()


@pytest.mark.parametrize("suffix, write", [(".gz", gzip.compress), (".bz2", bz2.compress), (".jsonl", bytes)])
def test_other_compressions_and_plain_json_lines_read_the_same(tmp_path, suffix, write):
    data = as_lines(month())
    path = tmp_path / f"RS_2011-05{suffix}"
    path.write_bytes(write(data))
    with open_dump(path) as stream:
        assert stream.read() == data


def test_a_months_links_are_a_url_list_and_every_other_line_a_reject_with_its_reason(tmp_path):
    rows = month()
    path = tmp_path / "RS_2011-02.zst"
    lines = as_lines(rows[:100]) + b"{not json\n\n[1, 2]\n" + as_lines(rows[100:])
    path.write_bytes(zstandard.ZstdCompressor().compress(lines))
    manifest = reddit_links(path, tmp_path / "out" / "RS_2011-02.jsonl", RedditConfig())
    kept = [json.loads(line) for line in (tmp_path / "out" / "RS_2011-02.jsonl").read_text().splitlines()]
    rejects = pq.read_table(rejects_path(tmp_path / "out" / "RS_2011-02.jsonl")).to_pylist()
    expected = [row for row in rows if not row["is_self"] and row["score"] >= 3 and not row["over_18"]]
    assert [k["url"] for k in kept] == [row["url"] for row in expected]
    assert kept[0] == {"url": expected[0]["url"], "submission_id": expected[0]["id"], "score": expected[0]["score"],
                       "subreddit": expected[0]["subreddit"], "created_utc": int(expected[0]["created_utc"])}
    assert manifest["counts"]["input"] == len(rows) + 2 == len(kept) + len(rejects)
    assert {r["source"]: r["reason"] for r in rejects if r["reason"] in ("invalid_json", "not_an_object")} == \
        {"RS_2011-02.zst:101": "invalid_json", "RS_2011-02.zst:103": "not_an_object"}
    reasons = {r["reason"] for r in rejects}
    assert {"self_post", "low_score", "nsfw"} <= reasons
    assert manifest["reasons"] == {reason: sum(r["reason"] == reason for r in rejects) for reason in reasons}


def test_the_same_dump_gives_the_same_bytes(tmp_path):
    path = write_dump(month(), tmp_path / "RS_2011-02.zst")
    for name in ("a", "b"):
        reddit_links(path, tmp_path / name / "RS_2011-02.jsonl", RedditConfig())
    for file in ("RS_2011-02.jsonl", ".rejects/RS_2011-02.parquet"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()


def test_subreddit_filters_nsfw_and_bad_records_are_counted_rejects():
    rules = RedditConfig(min_score=0, subreddits=("news", "Science"), exclude_subreddits=("science",), nsfw=True)
    link = {"id": "a", "url": "https://example.com/", "score": 5, "is_self": False, "subreddit": "News", "over_18": True,
            "created_utc": "1300000000.0"}
    assert judge(link, rules) == (Link("https://example.com/", "a", 5, "News", 1_300_000_000), None)
    assert judge({**link, "subreddit": "SCIENCE"}, rules) == (None, "subreddit_excluded")
    assert judge({**link, "subreddit": "pics"}, rules) == (None, "subreddit_not_listed")
    assert judge({**link, "over_18": True}, RedditConfig()) == (None, "nsfw")
    assert judge({**link, "score": None}, rules) == (None, "no_score")
    assert judge({**link, "score": True}, rules) == (None, "no_score")
    assert judge({**link, "score": 2}, RedditConfig()) == (None, "low_score")
    assert judge({**link, "url": "ftp://example.com/"}, rules) == (None, "no_link")
    assert judge({**link, "url": ""}, rules) == (None, "no_link")
    assert judge({**link, "is_self": True}, rules) == (None, "self_post")
    assert judge({**link, "created_utc": "yesterday"}, rules)[0].created_utc == -1
    assert judge([link], rules) == (None, "not_an_object")
