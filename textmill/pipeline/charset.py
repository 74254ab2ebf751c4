"""Fetched HTML decoded as a browser decodes it, before extraction: a byte order mark, else the charset the
server declared (Content-Type), else the one the page declares in its first bytes (<meta charset> or
<meta http-equiv="Content-Type">), else UTF-8 when the bytes are UTF-8, else detection (charset-normalizer).
Only the bytes that do not decode are replaced (U+FFFD), so one stray byte does not garble a page."""

from __future__ import annotations

import codecs
import re

# Labels browsers read as a larger encoding (the WHATWG Encoding Standard): what pages declaring them hold.
_SUPERSETS = {"ascii": "cp1252", "iso8859-1": "cp1252", "gb2312": "gb18030", "gbk": "gb18030",
              "shift_jis": "cp932", "euc_kr": "cp949", "iso8859-9": "cp1254", "tis-620": "cp874"}
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_CHARSET = re.compile(rb"""charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_META = re.compile(rb"<meta\s[^>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9._:-]+)", re.IGNORECASE)
PRESCAN_BYTES = 4096  # how far into the page a <meta> charset counts (browsers look at 1024 bytes, pages not)


def codec_of(label: bytes | str | None) -> str | None:
    """The Python codec for a declared charset, or None when there is none or Python knows no such one."""
    if not label:
        return None
    text = label.decode("ascii", "replace") if isinstance(label, bytes) else label
    try:
        name = codecs.lookup(text.strip().lower()).name
    except LookupError:
        return None
    return _SUPERSETS.get(name, name)


def declared_in_header(content_type: str | None) -> str | None:
    match = _CHARSET.search(content_type.encode("latin-1", "replace")) if content_type else None
    return codec_of(match.group(1)) if match else None


def declared_in_page(body: bytes) -> str | None:
    """The <meta> charset; a UTF-16 one is UTF-8 (a declaration read as ASCII cannot be UTF-16's)."""
    match = _META.search(body[:PRESCAN_BYTES])
    codec = codec_of(match.group(1)) if match else None
    return "utf-8" if codec and codec.startswith("utf-16") else codec


def detected(body: bytes) -> str:
    """UTF-8 when the bytes are UTF-8; else what charset-normalizer finds most likely; else windows-1252."""
    try:
        body.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(body).best()
    return (codec_of(best.encoding) if best is not None else None) or "cp1252"


def decode_html(body: bytes, content_type: str | None = None) -> tuple[str, str]:
    """(text, how it was decoded: "bom:CODEC", "header:CODEC", "meta:CODEC" or "detected:CODEC")."""
    for bom, codec in _BOMS:
        if body.startswith(bom):
            return body[len(bom):].decode(codec, "replace"), f"bom:{codec}"
    for source, codec in (("header", declared_in_header(content_type)), ("meta", declared_in_page(body))):
        if codec:
            return body.decode(codec, "replace"), f"{source}:{codec}"
    codec = detected(body)
    return body.decode(codec, "replace"), f"detected:{codec}"
