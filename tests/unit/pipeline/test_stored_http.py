"""An HTTP response as an archive stores it (pipeline/stored_http.py): read as warcio reads one, judged as the live
fetch judges one, and bounded whatever the record holds (issues 62 and 65)."""

import gzip
import io
import zlib

import brotli
import pytest

from textmill.pipeline.stored_http import MAX_HEADER_BYTES, stored_response

PAGE = b"<html><head><title>t</title></head><body>" + b"<p>Words of an ordinary page.</p>" * 40 + b"</body></html>"
LIMIT = 1 << 20


def message(headers: list[bytes], body: bytes, line_end: bytes = b"\r\n", status: bytes = b"HTTP/1.1 200 OK") -> io.BytesIO:
    return io.BytesIO(line_end.join([status, *headers, b""]) + line_end + body)


def read(headers: list[bytes], body: bytes, **kwargs):
    return stored_response(message([b"Content-Type: text/html", *headers], body, **kwargs), LIMIT)


def test_a_plain_response_and_one_with_bare_line_feeds_give_their_status_headers_and_body():
    got = read([b"X-A: 1", b"X-A: 2", b"Folded: first", b"  second"], PAGE)
    assert (got.status, got.body, got.reason) == (200, PAGE, None)
    assert got.headers == {"content-type": "text/html", "x-a": "1", "folded": "first second"}
    clueweb = read([b"Content-Type: text/html; charset=EUC-JP"], PAGE, line_end=b"\n")  # ClueWeb09's headers
    assert (clueweb.headers["content-type"], clueweb.body) == ("text/html", PAGE)  # the first Content-Type


@pytest.mark.parametrize("status", [b"HTTP/1.1 2OO OK", b"garbage", b"", b"HTTP/1.1"])
def test_a_status_line_that_does_not_parse_is_a_broken_response(status):
    assert read([], PAGE, status=status).reason == "broken_response"


def test_headers_past_the_bound_are_a_broken_response_read_no_further():
    got = read([b"X-H%d: v" % i for i in range(100_000)], PAGE)
    assert (got.status, got.reason) == (None, "broken_response")
    assert read([b"X-H: " + b"v" * (MAX_HEADER_BYTES - 100)], PAGE).body == PAGE


def chunked(body: bytes, size: int = 100) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size]) for i in range(0, len(body), size))


@pytest.mark.parametrize("stored, body", [
    (chunked(PAGE) + b"0\r\n\r\n", PAGE),
    (chunked(PAGE).replace(b"\r\n", b"\n") + b"0\n\n", PAGE),  # bare line feeds
    (PAGE, PAGE),  # stored de-chunked under its chunked header (pywb's recordings): taken as it is
    (b"zz\r\n" + PAGE + b"\r\n0\r\n\r\n", b"zz\r\n" + PAGE + b"\r\n0\r\n\r\n"),  # not a chunk header: as it is
    (b"ffffffffffffffff\r\n" + PAGE, b"ffffffffffffffff\r\n" + PAGE),  # a size past the body: as it is
    (chunked(PAGE) + b"zz\r\nmore", PAGE),  # broken part-way: the chunks before
])
def test_a_chunked_body_is_undone_and_one_that_is_not_chunked_is_taken_as_stored(stored, body):
    assert read([b"Transfer-Encoding: chunked"], stored).body == body


@pytest.mark.parametrize("coding, encode", [
    (b"gzip", gzip.compress), (b"x-gzip", gzip.compress), (b"deflate", zlib.compress),
    (b"deflate", lambda data: zlib.compress(data, wbits=-15)), (b"br", brotli.compress), (b"identity", bytes),
])
def test_a_content_coding_is_undone(coding, encode):
    assert read([b"Content-Encoding: " + coding], encode(PAGE)).body == PAGE
    both = read([b"Content-Encoding: " + coding, b"Transfer-Encoding: chunked"], chunked(encode(PAGE)) + b"0\r\n\r\n")
    assert both.body == PAGE


def test_a_body_that_does_not_decode_is_taken_as_stored_and_one_that_breaks_part_way_is_broken():
    assert read([b"Content-Encoding: gzip"], PAGE).body == PAGE  # stored decoded under its header
    assert read([b"Content-Encoding: br"], PAGE).body == PAGE
    broken = bytearray(gzip.compress(PAGE * 50))
    broken[-8] ^= 0xFF  # its CRC: found wrong once the whole body has decoded
    assert read([b"Content-Encoding: gzip"], bytes(broken)).reason == "broken_response"
    cut = gzip.compress(PAGE * 50)[:-200]  # cut short, as a crawler truncates a record: what decodes
    assert (PAGE * 50).startswith(read([b"Content-Encoding: gzip"], cut).body)


def test_a_body_past_the_cap_is_too_large_and_a_bomb_is_never_inflated_whole():
    assert read([], b"a" * (LIMIT + 1)).reason == "too_large"
    for coding, encode in ((b"gzip", gzip.compress), (b"br", brotli.compress)):
        bomb = encode(bytes(256 << 20))
        assert read([b"Content-Encoding: " + coding], bomb).reason == "too_large"
    stored = io.BytesIO(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n" + b"a" * (8 * LIMIT))
    assert stored_response(stored, LIMIT).reason == "too_large" and stored.tell() < 3 * LIMIT + MAX_HEADER_BYTES


def test_a_body_the_caller_does_not_want_is_not_read():
    stored = message([b"Content-Type: application/pdf"], b"%PDF" * 1000)
    got = stored_response(stored, LIMIT, lambda status, headers: headers["content-type"] == "text/html")
    assert (got.status, got.body, got.reason) == (200, None, None) and stored.tell() < 100 + MAX_HEADER_BYTES
