"""What a file given as a web archive is, when it is not a WARC file a reader can start at any record of: said in
one true line with the fix, instead of "truncated or damaged" (issue 65).

- a whole file gzipped as one member (`gzip file.warc`): `gzip -t` passes it, but no record can be read alone, and
  the one member's end does not fall where a record's does;
- an LZ4- or zstd-compressed WARC (`.warc.lz4`, `.warc.zst`: textmill reads gzip and plain WARC);
- an ARC file (the Internet Archive's format before WARC, `filedesc://` first);
- a WARC file whose header lines end in CR CR LF (its line ends converted twice), which warcio reads and FastWARC
  does not.
"""

from __future__ import annotations

import zlib
from pathlib import Path

_HEAD = 1 << 16
RECOMPRESS = "warcio recompress FILE FIXED.warc.gz (warcio, pip install warcio) writes"  # the fix of the last three


def what_it_is(path: Path) -> str | None:
    """A line saying what `path` is instead, with how to read it; None when it looks like a WARC file."""
    with open(path, "rb") as f:
        head = f.read(_HEAD)
    if head.startswith(b"\x04\x22\x4d\x18"):
        return f"{path} is LZ4-compressed: textmill reads .warc.gz and .warc; lz4 -d it, then gzip it a record a member"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return f"{path} is zstd-compressed: textmill reads .warc.gz and .warc; zstd -d it (a plain .warc is read)"
    inflated = _first_member(head) if head.startswith(b"\x1f\x8b") else b""
    if head.lstrip().startswith(b"filedesc://") or inflated.lstrip().startswith(b"filedesc://"):
        return (f"{path} is an ARC file (the format before WARC{', gzipped' if inflated else ''}), which textmill does "
                f"not read: {RECOMPRESS} it as WARC")
    if inflated.startswith(b"WARC/") and inflated.count(b"\nWARC/1.") >= 1:  # one member holds two records' starts
        return f"{path} is gzipped whole, as one member, so no record of it can be read alone: {RECOMPRESS} a member per record"
    first_line = (inflated or head).split(b"\n", 1)[0]
    if first_line.startswith(b"WARC/") and first_line.endswith(b"\r\r"):
        return (f"{path} has WARC header lines ending in CR CR LF (line ends converted twice), which textmill's WARC "
                f"reader does not read: {RECOMPRESS} them with CR LF, a member a record")
    return None


def _first_member(head: bytes) -> bytes:
    """What the first gzip member of a file starting with `head` inflates to, as far as `head` and a bound go."""
    try:
        return zlib.decompressobj(31).decompress(head, 4 * _HEAD)
    except zlib.error:
        return b""
