"""Small files that hold a great deal: what a hostile or careless source sends to see whether memory follows what a
record declares or decompresses to (issue 62). Each is written a piece at a time, so writing one is cheap too."""

import zlib
from pathlib import Path

PIECE = 1 << 24  # 16 MiB of the repeated byte per compression call


def zst_with_a_huge_line(path: Path, gib: int) -> Path:
    """A Pushshift-style dump: a submission, a line of `gib` GiB (a "x" field of one letter), a submission."""
    from backports import zstd

    compressor, piece = zstd.ZstdCompressor(level=1), b"a" * PIECE
    with open(path, "wb") as f:
        f.write(compressor.compress(b'{"url": "http://a.example/1", "score": 5}\n{"url": "http://a.example/2", "x": "'))
        for _ in range(gib * (1 << 30) // PIECE):
            f.write(compressor.compress(piece))
        f.write(compressor.compress(b'"}\n{"url": "http://a.example/3", "score": 7}\n', compressor.FLUSH_FRAME))
    return path


def gzip_member_of_zeros(f, head: bytes, gib: int, tail: bytes = b"") -> None:
    """One gzip member written to the open file `f`: `head`, `gib` GiB of zero bytes, `tail`."""
    member, zeros = zlib.compressobj(1, wbits=31), bytes(PIECE)
    f.write(member.compress(head))
    for _ in range(gib * (1 << 30) // PIECE):
        f.write(member.compress(zeros))
    f.write(member.compress(tail) + member.flush())


def response_of_zeros(url: str, date: str, gib: int) -> tuple[bytes, bytes]:
    """The head of a WARC response record whose HTML body is `gib` GiB of zero bytes, and the record's end."""
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n"
    head = (b"WARC/1.1\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-000000000001>\r\n"
            b"WARC-Date: %s\r\nWARC-Target-URI: %s\r\nContent-Type: application/http; msgtype=response\r\n"
            b"Content-Length: %d\r\n\r\n" % (date.encode(), url.encode(), len(http) + gib * (1 << 30)))
    return head + http, b"\r\n\r\n"
