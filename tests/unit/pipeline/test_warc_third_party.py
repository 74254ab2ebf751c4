"""Archives another tool wrote (warcio's own test files, tests/data/warcio, SOURCES.md): every response warcio reads
as an HTML page is a document of textmill's, with the same URL; a file textmill does not read says what it is."""

import hashlib
import re

import pyarrow.parquet as pq
import pytest
from warcio.archiveiterator import ArchiveIterator

from support.files import TEST_DATA
from textmill.errors import TextmillError
from textmill.pipeline.shards import rejects_path
from textmill.pipeline.stage_configs import ScrapeConfig
from textmill.pipeline.units import warc_units
from textmill.pipeline.warc import warc_shard

FILES = TEST_DATA / "warcio"
SHA256 = {
    "example-bad-non-chunked.warc.gz": "2fb33d4b5c6fb2739fbe7d46c60e72b432a44facb456134f0125d5e8faf6d74a",
    "example-digest.warc": "bfaf8596b743a8fc018abe7fd47f8e63598dd126f77cebe7142dd896c09f96cd",
    "example-iana.org-chunked.warc": "539c746feb63bd12da81375485e906115b874899d68e4f190f5d70d1785c3933",
    "example-resource.warc.gz": "9d3f830f757a3733d56de5b76b5a3ccabb5de4cfdfed2559205b9c719ee6cbdb",
    "example-trunc.warc": "2f14d2a2ff6ce39a2f76ecd806a838793c33a8a3bd8d1f02868de65b1e1ef908",
    "example-wget-bad-target-uri.warc.gz": "46c5ac2c893a5e2036b45821ca373fcb3c57bb4de69ea47bb5a18878248a1fa0",
    "example-wrong-chunks.warc.gz": "1f563e1b9ac122efff45b3002928ff873bd84db64dd70b1b00c81dd1a1875160",
    "example.arc": "433c37ee6dd684849ecde16d566f65545c93fd8d0b3297c1735eb76f0a0cf496",
    "example.arc.gz": "d6d0d772521e89dc461235ddbefae4888a20a47b1c0a45e69ec8ec086f4d3c7c",
    "example.warc": "5cc2724ab2969d5fd00a9b9293cce2a50ba0471ea03822e03f513715171ca0d3",
    "example.warc.gz": "5144459799b3bcb894d5143e0d8171c20c591a41733608e8392346e95e0bcf6b",
    "post-test.warc.gz": "4a889c4d15f5624557f5fad4026b4346f33c514f0aae1e18c7823b4c6943dce4",
}


def test_the_copies_are_warcios_files():
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in FILES.iterdir()} == SHA256


def warcio_pages(path) -> list[str]:
    """The URLs of the responses warcio reads as HTTP 200 HTML."""
    with open(path, "rb") as f:
        return [r.rec_headers.get_header("WARC-Target-URI").strip("<>") for r in ArchiveIterator(f)
                if r.rec_type == "response" and r.http_headers.get_statuscode() == "200"
                and "html" in (r.http_headers.get_header("Content-Type") or "")]


def textmill_read(path, tmp_path) -> tuple[list[dict], list[dict], list[dict]]:
    kept, rejected, manifests = [], [], []
    for unit in warc_units(path, 10_000):
        output = tmp_path / f"{unit.name}.parquet"
        manifests.append(warc_shard(unit, output, ScrapeConfig(extract_workers=0)))
        kept += pq.read_table(output).to_pylist()
        rejected += pq.read_table(rejects_path(output)).to_pylist()
    return kept, rejected, manifests


@pytest.mark.parametrize("name", ["example.warc.gz", "example.warc", "example-iana.org-chunked.warc",
                                  "example-wget-bad-target-uri.warc.gz", "example-trunc.warc"])
def test_every_page_warcio_reads_is_a_document(name, tmp_path):
    """The iana.org capture stores its body de-chunked under a chunked header (read raw, as warcio reads it); wget's
    bracketed Target-URI is the URL inside; a response whose Content-Length is short of its block is read to its
    declared length, and the records after it are read too (the bytes between stepped over, as warcio steps)."""
    pages = warcio_pages(FILES / name)
    kept, rejected, _ = textmill_read(FILES / name, tmp_path)
    assert pages and [r["url"] for r in kept] == pages and not rejected
    assert all(len(r["text"]) > 50 for r in kept)


def test_chunk_sizes_that_do_not_add_up_are_read_raw(tmp_path):
    """warcio's iterator, reading this file's body as chunks, ends with an error at the next record; textmill reads
    the body raw and keeps the page."""
    with pytest.raises(Exception, match="Invalid WARC record"):
        warcio_pages(FILES / "example-wrong-chunks.warc.gz")
    kept, rejected, _ = textmill_read(FILES / "example-wrong-chunks.warc.gz", tmp_path)
    assert [r["url"] for r in kept] == ["http://example.com/"] and "illustrative examples" in kept[0]["text"]
    assert not rejected


def test_json_answers_are_rejects_with_their_content_type(tmp_path):
    kept, rejected, _ = textmill_read(FILES / "post-test.warc.gz", tmp_path)
    assert not kept and [r["reason"] for r in rejected] == ["content_type=application/json"] * 3


@pytest.mark.parametrize("name, holds", [("example-digest.warc", {"request": 4}),
                                         ("example-resource.warc.gz", {"resource": 1, "warcinfo": 2})])
def test_a_file_without_responses_counts_what_it_holds(name, holds, tmp_path):
    kept, rejected, [manifest] = textmill_read(FILES / name, tmp_path)
    assert not kept and not rejected and manifest["other_records"] == holds


@pytest.mark.parametrize("name, said", [
    ("example.arc", "is an ARC file (the format before WARC), which textmill does not read"),
    ("example.arc.gz", "is an ARC file (the format before WARC, gzipped)"),
    ("example-bad-non-chunked.warc.gz", "is gzipped whole, as one member"),
])
def test_a_file_textmill_does_not_read_says_what_it_is_and_the_fix(name, said):
    with pytest.raises(TextmillError, match=re.escape(said)) as raised:
        warc_units(FILES / name, 10)
    assert "warcio recompress" in str(raised.value)


def test_the_record_after_a_short_content_length_is_read(tmp_path):
    _, _, [manifest] = textmill_read(FILES / "example-trunc.warc", tmp_path)
    assert manifest["other_records"] == {"request": 1, "warcinfo": 2} and manifest["counts"]["kept"] == 1
