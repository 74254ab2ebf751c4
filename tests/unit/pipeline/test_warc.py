"""Pages read from web archives (pipeline/warc.py, units.warc_units): the synthetic web's pages archived, by textmill's
writer and by warcio's (another tool's), extracted as the scrape extracts a fetched page; units of any size giving the
same documents; encodings undone within the size cap; an archive cut short an error, not a shorter archive."""

import gzip
import io
import json

import pyarrow.parquet as pq
import pytest

from textmill.demo import synthweb
from textmill.demo.archive import CRAWLED_AT, write_archive
from textmill.errors import TextmillError
from textmill.pipeline.scrape import extracted
from textmill.pipeline.shards import rejects_path
from textmill.pipeline.stage_configs import ScrapeConfig
from textmill.pipeline.units import warc_units
from textmill.pipeline.warc import warc_shard
from textmill.pipeline.warc_records import response_record, warc_record

BASE = "http://127.0.0.1:8000"
CONFIG = ScrapeConfig(extract_workers=0)


@pytest.fixture(scope="module")
def web():
    return synthweb.build_web(seed=7, articles=30, near_duplicates=4, foreign=3, mojibake=2, short=2)


def read_all(archive, tmp_path, per_unit=10_000, cfg=CONFIG) -> tuple[list[dict], list[dict], list[dict]]:
    """Every unit of `archive` through the stage: the kept rows, the rejected rows, the manifests."""
    kept, rejected, manifests = [], [], []
    for unit in warc_units(archive, per_unit):
        output = tmp_path / f"out-{per_unit}" / f"{unit.name}.parquet"
        manifests.append(warc_shard(unit, output, cfg))
        kept += pq.read_table(output).to_pylist()
        rejected += pq.read_table(rejects_path(output)).to_pylist()
    return kept, rejected, manifests


def test_an_archived_page_is_the_document_its_fetch_gives_and_the_rest_are_rejects_with_reasons(web, tmp_path):
    archive = write_archive(web, BASE, tmp_path / "crawl.warc.gz")
    kept, rejected, [manifest] = read_all(archive, tmp_path)
    static = [p for p in web.url_paths if web.pages[p].behaviour == "static"]
    assert manifest["counts"]["input"] == len(static) == len(kept) + len(rejected)
    assert manifest["other_records"] == {"request": len(static)}
    for row in kept:
        page = web.pages[row["url"].removeprefix(BASE)]
        fields, reason, _ = extracted(None, row["url"], page.body, page.content_type, CONFIG.extractor)
        assert reason is None and {k: row[k] for k in fields} == fields
        assert row["status"] == 200 and row["fetched_at"] == CRAWLED_AT and row["domain"] == "127.0.0.1"
        assert json.loads(row["metadata"])["warc_file"] == "crawl.warc.gz"
    assert {r["url"].removeprefix(BASE): r["reason"] for r in rejected} == {
        "/missing.html": "status=404", "/error.html": "status=500", "/loop/a.html": "status=302",
        "/redirect/0.html": "status=301", "/huge.html": "too_large", "/binary.html": "binary_content",
        "/report.pdf.html": "content_type=application/pdf", "/empty.html": "empty_extraction"}


def test_units_of_any_size_give_the_same_documents(web, tmp_path):
    archive = write_archive(web, BASE, tmp_path / "crawl.warc.gz")
    whole = read_all(archive, tmp_path)[:2]
    for per_unit in (1, 7):
        assert len(warc_units(archive, per_unit)) > 1
        assert read_all(archive, tmp_path, per_unit)[:2] == whole


def test_an_archive_warcio_wrote_reads_as_textmills_own(web, tmp_path):
    """Another tool's archive (warcio's writer: request and response records, a warcinfo record first, records
    of its own ids and times): the same pages kept, the same texts."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    paths = [p for p in web.url_paths if web.pages[p].behaviour == "static"]
    with open(tmp_path / "theirs.warc.gz", "wb") as f:
        writer = WARCWriter(f, gzip=True)
        writer.write_record(writer.create_warcinfo_record("theirs.warc.gz", {"software": "warcio"}))
        for path in paths:
            page = web.pages[path]
            writer.write_record(writer.create_warc_record(BASE + path, "request", payload=io.BytesIO(b"GET / HTTP/1.1\r\n\r\n")))
            headers = StatusAndHeaders(f"{page.status} X", [("Content-Type", page.content_type)], protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(BASE + path, "response", payload=io.BytesIO(page.body),
                                                          http_headers=headers))
    ours = read_all(write_archive(web, BASE, tmp_path / "ours.warc.gz", paths), tmp_path / "ours")
    theirs = read_all(tmp_path / "theirs.warc.gz", tmp_path / "theirs")
    drop = ("metadata", "fetched_at")
    assert [{k: v for k, v in r.items() if k not in drop} for r in theirs[0]] == \
        [{k: v for k, v in r.items() if k not in drop} for r in ours[0]]
    assert [r["reason"] for r in theirs[1]] == [r["reason"] for r in ours[1]]
    assert theirs[2][0]["other_records"] == {"request": len(paths), "warcinfo": 1}


def test_encodings_are_undone_within_the_size_cap_and_other_records_are_counted(tmp_path):
    page = synthweb.html_page("Encoded", synthweb.prose(__import__("random").Random(1), 4)).encode()
    bomb = gzip.compress(b"<html><body>" + b"a" * (8 << 20) + b"</body></html>")  # 8 MiB once decoded
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(page[i:i + 100]), page[i:i + 100]) for i in range(0, len(page), 100))
    html = [("Content-Type", "text/html; charset=utf-8")]
    with open(tmp_path / "mixed.warc.gz", "wb") as f:
        f.write(warc_record("warcinfo", "", CRAWLED_AT, b"software: test\r\n", "application/warc-fields"))
        f.write(response_record("http://a.example/gz", CRAWLED_AT, 200, [*html, ("Content-Encoding", "gzip")],
                                gzip.compress(page)))
        f.write(response_record("http://a.example/chunked", CRAWLED_AT, 200, [*html, ("Transfer-Encoding", "chunked")],
                                chunks + b"0\r\n\r\n"))
        f.write(response_record("http://a.example/bomb", CRAWLED_AT, 200, [*html, ("Content-Encoding", "gzip")], bomb))
        f.write(warc_record("response", "dns:a.example", CRAWLED_AT, b"a.example. 60 IN A 10.0.0.1", "text/dns"))
        f.write(warc_record("revisit", "http://a.example/gz", CRAWLED_AT, b"", "application/http; msgtype=response"))
        f.write(warc_record("metadata", "http://a.example/gz", CRAWLED_AT, b"fetchTimeMs: 12\r\n", "application/warc-fields"))
    kept, rejected, [manifest] = read_all(tmp_path / "mixed.warc.gz", tmp_path, cfg=ScrapeConfig(extract_workers=0,
                                                                                                  max_bytes=1 << 20))
    expected = extracted(None, "http://a.example/gz", page, html[0][1], CONFIG.extractor)[0]
    assert [(r["url"], r["text"]) for r in kept] == [("http://a.example/gz", expected["text"]),
                                                      ("http://a.example/chunked", expected["text"])]
    assert [(r["url"], r["reason"]) for r in rejected] == [("http://a.example/bomb", "too_large"),
                                                           ("dns:a.example", "bad_url")]
    assert manifest["other_records"] == {"metadata": 1, "revisit": 1, "warcinfo": 1}


@pytest.mark.parametrize("cut", [0.5, 0.999])
def test_an_archive_cut_short_is_one_error(web, tmp_path, cut):
    whole = write_archive(web, BASE, tmp_path / "whole.warc.gz").read_bytes()
    (tmp_path / "cut.warc.gz").write_bytes(whole[: int(len(whole) * cut)])
    with pytest.raises(TextmillError, match="cut short"):
        warc_units(tmp_path / "cut.warc.gz", 10)
    plain = gzip.decompress(whole)
    (tmp_path / "cut.warc").write_bytes(plain[: int(len(plain) * cut)])
    with pytest.raises(TextmillError, match="cut short"):
        warc_units(tmp_path / "cut.warc", 10)


def hostile_archive(path, page: bytes) -> None:
    """A good page, then each response issue 62 found ending its whole unit, each between good pages."""
    html = [("Content-Type", "text/html")]
    chunked, gz = ("Transfer-Encoding", "chunked"), ("Content-Encoding", "gzip")
    odd = {
        "chunk-zz": ([*html, chunked], b"zz\r\n" + page + b"\r\n0\r\n\r\n"),
        "chunk-huge": ([*html, chunked], b"ffffffffffffffff\r\n" + page + b"\r\n0\r\n\r\n"),
        "dechunked": ([*html, chunked], page),  # pywb's quirk: stored de-chunked under its chunked header
        "not-gzip": ([*html, gz], page),
        "gzip-6mib": ([*html, gz], gzip.compress(page * (6 * 1024 * 1024 // len(page) + 1))),
        "gzip-bomb": ([*html, gz], gzip.compress(bytes(1 << 30), 1)),
        "headers": ([*html, *((f"X-H{i}", "v") for i in range(100_000))], page),
    }
    with open(path, "wb") as f:
        f.write(response_record("http://a.example/first", CRAWLED_AT, 200, html, page))
        for name, (headers, body) in odd.items():
            f.write(response_record(f"http://a.example/{name}", CRAWLED_AT, 200, headers, body))
            f.write(response_record(f"http://a.example/after-{name}", CRAWLED_AT, 200, html, page))


def test_one_odd_response_is_that_pages_answer_and_every_other_page_of_the_unit_is_kept(tmp_path):
    """Issue 62: a chunk size `zz` or `ffffffffffffffff`, a gzip Content-Encoding that is not gzip, a gzip body
    decoding past max_bytes, a gzip bomb and 100,000 header lines each ended the unit ("cannot read ... as WARC"),
    every rerun. Each is one record's answer now, read as warcio reads it."""
    page = synthweb.html_page("Odd", synthweb.prose(__import__("random").Random(2), 4)).encode()
    hostile_archive(tmp_path / "odd.warc.gz", page)
    kept, rejected, [manifest] = read_all(tmp_path / "odd.warc.gz", tmp_path)
    assert {r["url"].removeprefix("http://a.example/"): r["reason"] for r in rejected} == {
        "gzip-6mib": "too_large", "gzip-bomb": "too_large", "headers": "broken_response"}
    kept_names = [r["url"].removeprefix("http://a.example/") for r in kept]
    assert kept_names == ["first", "chunk-zz", "after-chunk-zz", "chunk-huge", "after-chunk-huge", "dechunked",
                          "after-dechunked", "not-gzip", "after-not-gzip", "after-gzip-6mib", "after-gzip-bomb",
                          "after-headers"]
    texts = {name: row["text"] for name, row in zip(kept_names, kept, strict=True)}
    assert texts["dechunked"] == texts["not-gzip"] == texts["first"]
    assert manifest["counts"]["input"] == 15 == len(kept) + len(rejected)


def test_a_3_gib_record_as_the_archives_last_member_is_read_in_bounded_memory(tmp_path):
    """Issue 62: a 1 GiB record of zeros as the last gzip member of an archive took 2.1 GB (3 GiB: 6.2 GB) though
    its page was rejected: the check that the last member ends whole inflated a block of the file whole."""
    from support.bombs import gzip_member_of_zeros, response_of_zeros
    from support.memory import run_measured

    path = tmp_path / "big.warc.gz"
    with open(path, "wb") as f:
        f.write(response_record("http://a.example/first", CRAWLED_AT, 200, [("Content-Type", "text/html")],
                                b"<html><body><p>" + b"A few words. " * 40 + b"</p></body></html>"))
        head, tail = response_of_zeros("http://a.example/big", CRAWLED_AT, 3)
        gzip_member_of_zeros(f, head, 3, tail)
    code = ("import sys; from pathlib import Path; from textmill.pipeline.units import warc_units; "
            "from textmill.pipeline.warc import warc_shard; from textmill.pipeline.stage_configs import ScrapeConfig; "
            "[unit] = warc_units(Path(sys.argv[1]), 100); "
            "m = warc_shard(unit, Path(sys.argv[2]), ScrapeConfig(extract_workers=0)); result = m['reasons']")
    reasons, peak_mb = run_measured(code, str(path), str(tmp_path / "out" / "big.parquet"))
    assert reasons == {"too_large": 1} and peak_mb < 500, (reasons, peak_mb)


def test_a_units_responses_are_counted_as_they_are_read(web, tmp_path, monkeypatch, capsys):
    """Issue 65: one big archive showed `0 task of 1 task (0%)` until it was done. Its responses are counted within
    the unit, a line every TEXTMILL_PROGRESS_S seconds without a terminal."""
    monkeypatch.setenv("TEXTMILL_PROGRESS_S", "0")
    archive = write_archive(web, BASE, tmp_path / "crawl.warc.gz")
    [unit] = warc_units(archive, 10_000)
    manifest = warc_shard(unit, tmp_path / "out" / "crawl.parquet", CONFIG)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith(f"warc {unit.shown()}: ")]
    assert len(lines) >= manifest["counts"]["input"] and lines[-1].endswith("done")
    assert f": {manifest['counts']['input']} response, " in lines[-1]


@pytest.mark.parametrize("kind, write, said", [
    ("whole", lambda plain: gzip.compress(plain), "is gzipped whole, as one member, so no record of it can be read "
                                                  "alone: warcio recompress"),
    ("lz4", lambda plain: b"\x04\x22\x4d\x18" + plain, "is LZ4-compressed"),
    ("zstd", lambda plain: b"\x28\xb5\x2f\xfd" + plain, "is zstd-compressed"),
    ("arc", lambda plain: b"filedesc://old.arc 0.0.0.0 20040101000000 text/plain 76\n1 0 Alexa\n\n", "is an ARC file"),
    ("crcrlf", lambda plain: plain.replace(b"\r\n", b"\r\r\n"), "header lines ending in CR CR LF"),
])
def test_a_file_that_is_not_a_warc_a_reader_can_start_anywhere_says_what_it_is(web, tmp_path, kind, write, said):
    """Issue 65: a whole-file gzip (`gzip file.warc`, which `gzip -t` passes) and an .lz4 WARC were "truncated or
    damaged", an ARC file "Invalid WARC header": each says what it is, and the fix."""
    plain = gzip.decompress(write_archive(web, BASE, tmp_path / "crawl.warc.gz").read_bytes())
    (tmp_path / f"{kind}.warc.gz").write_bytes(write(plain))
    with pytest.raises(TextmillError, match=said):
        warc_units(tmp_path / f"{kind}.warc.gz", 10)


def test_archives_without_a_response_say_what_they_hold():
    from textmill.report.lines import no_responses

    assert no_responses({"request": 3}) == "warc read no response records (pages): its archives hold request 3"
    assert no_responses({"conversion": 2, "warcinfo": 1}).startswith(
        "warc read no response records (pages): its archives hold conversion 2, warcinfo 1; a WET file holds the text")
