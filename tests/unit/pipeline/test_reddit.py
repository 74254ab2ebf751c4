"""Pushshift submission dumps, generated in their schema and compressed as the real ones are, read as streams and
judged by OpenWebText's rules into JSON-lines URL lists with their rejects and manifests."""

import bz2
import gzip
import json

import pyarrow.parquet as pq
import pytest
from backports import zstd

from support.bombs import zst_with_a_huge_line
from support.memory import run_measured

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
    with pytest.raises(zstd.ZstdError, match="too much memory"):  # a window past zstd's default 128 MiB
        zstd.decompress(path.read_bytes())
    with open_dump(path) as stream:
        assert stream.read() == as_lines(rows)


def test_frames_written_one_after_another_read_as_one_stream(tmp_path):
    path = tmp_path / "RS_2011-03.zst"
    path.write_bytes(b"".join(zstd.compress(as_lines(month(seed))) for seed in (1, 2)))
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
    path.write_bytes(zstd.compress(lines))
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
    for score in (-10**30, 2**63, "5", 5.0, "1" * 5000):
        assert judge({**link, "score": score}, rules) == (None, "bad_score")
    for created in ("inf", float("inf"), float("nan"), "NaN", 10**30, "1" * 5000):
        assert judge({**link, "created_utc": created}, rules) == (None, "bad_time")
    assert judge({**link, "score": 2}, RedditConfig()) == (None, "low_score")
    assert judge({**link, "url": "ftp://example.com/"}, rules) == (None, "no_link")
    assert judge({**link, "url": ""}, rules) == (None, "no_link")
    assert judge({**link, "is_self": True}, rules) == (None, "self_post")
    assert judge({**link, "created_utc": "yesterday"}, rules)[0].created_utc == -1
    assert judge([link], rules) == (None, "not_an_object")


def test_a_number_no_column_can_hold_is_that_submissions_reject_and_the_month_goes_on(tmp_path):
    """Issue 62: a score of -10**30 or of 5,000 digits, a created_utc of "inf", Infinity or NaN ended the month
    (OverflowError, ValueError), and the list stayed under its final name, part-written, without its manifest."""
    rows = month()[:200]
    odd = [b'{"id": "a", "url": "http://x.example/1", "score": -1000000000000000000000000000000}',
           b'{"id": "b", "url": "http://x.example/2", "score": ' + b"7" * 5000 + b"}",
           b'{"id": "c", "url": "http://x.example/3", "score": 9, "created_utc": "inf"}',
           b'{"id": "d", "url": "http://x.example/4", "score": 9, "created_utc": Infinity}',
           b'{"id": "e", "url": "http://x.example/5", "score": 9, "created_utc": NaN}',
           b'{"id": "f", "url": "http://x.example/6", "score": 9, "created_utc": 3, "n": ' + b"1" * 5000 + b"}"]
    path = tmp_path / "RS_2011-02.zst"
    path.write_bytes(zstd.compress(as_lines(rows[:100]) + b"\n".join(odd) + b"\n" + as_lines(rows[100:])))
    output = tmp_path / "out" / "RS_2011-02.jsonl"
    manifest = reddit_links(path, output, RedditConfig())
    kept = [json.loads(line) for line in output.read_text().splitlines()]
    rejects = {r["submission_id"]: r for r in pq.read_table(rejects_path(output)).to_pylist()}
    assert {k: rejects[k]["reason"] for k in "abcde"} == {"a": "bad_score", "b": "bad_score", "c": "bad_time",
                                                        "d": "bad_time", "e": "bad_time"}
    assert rejects["a"]["score"] is None and rejects["c"]["score"] == 9 and rejects["c"]["created_utc"] is None
    assert kept[[k["submission_id"] for k in kept].index("f")]["created_utc"] == 3  # a field it does not read
    assert manifest["counts"]["input"] == len(rows) + len(odd) == len(kept) + len(rejects)


def test_a_4_gib_line_packed_into_a_small_zst_is_rejected_too_large_in_bounded_memory(tmp_path):
    """Issue 62: a 131 KB .zst holding one 4 GiB line was rejected `too_large`, but took 4.2 GB of memory (a
    megabyte of the file was decompressed whole). Read a piece at a time, the process stays under 500 MB."""
    path = zst_with_a_huge_line(tmp_path / "RS_2011-02.zst", gib=4)
    assert path.stat().st_size < 200_000
    code = ("import sys; from pathlib import Path; from textmill.pipeline.reddit import reddit_links; "
            "from textmill.pipeline.stage_configs import RedditConfig; "
            "m = reddit_links(Path(sys.argv[1]), Path(sys.argv[2]), RedditConfig()); result = [m['counts'], m['reasons']]")
    (counts, reasons), peak_mb = run_measured(code, str(path), str(tmp_path / "out" / "RS_2011-02.jsonl"))
    assert counts["kept"] == 2 and reasons == {"too_large": 1}
    assert peak_mb < 500, f"{peak_mb} MB"


def test_pushshifts_html_escaped_urls_are_unescaped_and_counted(tmp_path):
    """Issue 65: 135 of 1,182 real 2005 submissions carry `&amp;` in their URL (the server then reads a parameter
    named `amp;u`); OpenWebText took them so. Unescaped by default, counted; unescape_urls = false keeps them."""
    rows = [{"id": "a", "url": "http://news.example/story?id=7&amp;u=3", "score": 9},
            {"id": "b", "url": "http://vimeo.example/watch?v=1&amp;amp;t=2", "score": 9},
            {"id": "c", "url": "http://plain.example/a?x=1&y=2", "score": 9}]
    path = tmp_path / "RS_2005-12.zst"
    path.write_bytes(zstd.compress(as_lines(rows)))
    manifest = reddit_links(path, tmp_path / "out" / "RS_2005-12.jsonl", RedditConfig())
    urls = [json.loads(line)["url"] for line in (tmp_path / "out" / "RS_2005-12.jsonl").read_text().splitlines()]
    assert urls == ["http://news.example/story?id=7&u=3", "http://vimeo.example/watch?v=1&amp;t=2",
                    "http://plain.example/a?x=1&y=2"]  # unescaped once, as Pushshift escaped once
    assert manifest["urls_unescaped"] == 2 and manifest["params"]["unescape_urls"] is True
    kept = reddit_links(path, tmp_path / "raw" / "RS_2005-12.jsonl", RedditConfig(unescape_urls=False))
    assert "urls_unescaped" not in kept
    assert json.loads((tmp_path / "raw" / "RS_2005-12.jsonl").read_text().splitlines()[0])["url"] == rows[0]["url"]
