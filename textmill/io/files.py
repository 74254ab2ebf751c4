"""Files every room writes and reads back: written under a temporary name and renamed into place when
whole (`atomic_path`, `write_json`; a folder: `atomic_folder`), read back with damage reported in one line (`read_json_record`),
fingerprinted (`file_fingerprint`), and JSON lines read with every bad line named (`iter_json_lines`). A
path in a store's mirror is fetched before it is read (textmill.io.store). Imports nothing else of textmill."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from textmill.errors import TextmillError
from textmill.io.store import fetch


def temporary_path(path: Path) -> Path:
    """A name beside `path` for writing it, unique to this process (a hidden file, so never read as a shard)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it is fsynced and renamed over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


class PendingFile:
    """A file written under a temporary name beside `path` (bytes appended with `write`): `close()` syncs it and
    renames it into place, `abort()` drops it. For files written a piece at a time, a shard's JSON lines or a
    web archive's records."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = temporary_path(path)
        self._file = open(self._tmp, "wb")

    def write(self, *pieces: bytes) -> None:
        for piece in pieces:
            self._file.write(piece)

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)


def given_files(given: Iterable[str | Path], suffixes: tuple[str, ...], kind: str) -> list[Path]:
    """Files given directly, and the files inside given directories whose names end in `suffixes` (any case),
    sorted; a directory with none, or a path that is neither, is one error naming what was looked for (`kind`)."""
    files: list[Path] = []
    for path in map(Path, given):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(suffixes))
            if not found:
                raise TextmillError(f"no {kind} ({', '.join('*' + s for s in suffixes)}) in directory {path}")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise missing_input(path)
    return files


def unique_names(files: list[Path], name_of, kind: str) -> list[Path]:
    """`files`, when no two of them give the same name (`name_of`: the name their output is given), else one error."""
    names = [name_of(p) for p in files]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise TextmillError(f"two {kind} map to the same name {clash[0]!r}; rename one")
    return files


def empty_folder_beside(path: Path) -> Path:
    """`.NAME.tmp` beside `path`, empty: where a folder is written before it takes `path`'s place."""
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def replace_folder(tmp: Path, path: Path) -> None:
    """The finished folder `tmp` in `path`'s place: an older `path` is renamed aside first and removed only once
    `tmp` holds its name, so a reader finds the old folder or the new one, never a part of either, and a failure
    between the two renames leaves the old folder whole beside (`.NAME.old`)."""
    if not path.exists():
        os.replace(tmp, path)
        return
    old = path.with_name(f".{path.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old)


# The file an export writes into its folder: a folder holding it was written by textmill and may be replaced.
EXPORT_MARKER = ".textmill-export"


def exported_folder(path: Path, what: str) -> Path:
    """`path`, absolute, when an export may take it: a folder that does not exist, an empty one, or an earlier export
    (it holds EXPORT_MARKER); anything else is one error, so that an export never deletes what it did not write."""
    path = Path(os.path.abspath(path))
    if path.parent == path:
        raise TextmillError(f"cannot write {what} to {path}: give a folder of its own")
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise TextmillError(f"cannot write {what} to {path}: it is a file or a link, not a folder; give a new folder")
    if path.is_dir() and any(path.iterdir()) and not (path / EXPORT_MARKER).is_file():
        raise TextmillError(f"cannot write {what} to {path}: it holds files textmill did not export there (no "
                            f"{EXPORT_MARKER}); give a new folder, or remove it yourself")
    return path


@contextmanager
def atomic_folder(path: Path, what: str = "the export") -> Iterator[Path]:
    """Yield an empty folder beside `path`; when the block ends without an error it replaces `path`, marked as an
    export (EXPORT_MARKER). `path` must be new, empty or an earlier export (exported_folder)."""
    path = exported_folder(path, what)
    tmp = empty_folder_beside(path)
    try:
        yield tmp
        (tmp / EXPORT_MARKER).write_text(f"{what}, written by textmill; the folder is replaced whole by the next "
                                         "export to it\n")
        replace_folder(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# Process-wide: the damaged files this process has reported already (each is said once, however often read).
REPORTED_DAMAGE: set[str] = set()


def report_damage(path: Path, problem: str, consequence: str) -> None:
    """One line on stderr about a damaged file textmill wrote, once per file and process."""
    if str(path) not in REPORTED_DAMAGE:
        REPORTED_DAMAGE.add(str(path))
        print(f"textmill: {path} is damaged ({problem}); {consequence}", file=sys.stderr)


def read_json_record(path: Path, consequence: str) -> dict | None:
    """A JSON object textmill wrote (a manifest, a done file, a run record), or None when it is missing. A
    damaged one (cut short by a full disk, edited by hand) is reported in one line ending in `consequence`
    and read as missing: every such file is derived, so what wrote it can write it again."""
    try:
        text = fetch(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, IsADirectoryError) as exc:
        report_damage(path, type(exc).__name__, consequence)
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        report_damage(path, "not a whole JSON object", consequence)
        return None
    return value


def read_json(path: Path):
    """A JSON file a finished task wrote (fetched from the store when its folder is in one)."""
    return json.loads(fetch(path).read_text(encoding="utf-8"))


def write_json(obj: dict, path: Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


# Process-wide: file_fingerprint by (path, size, mtime), so a large input is hashed once however many keys
# ask for it.
FINGERPRINTS: dict[tuple, dict] = {}


def file_fingerprint(path: Path) -> dict:
    """Path, size and sha256 of an input file, fetched first when it is in a store (cached per path, size
    and mtime within a process)."""
    return local_fingerprint(fetch(path))


def local_fingerprint(path: Path) -> dict:
    """Path, size and sha256 of a file on this machine (one just written, not yet in its store)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in FINGERPRINTS:
        FINGERPRINTS[key] = {"path": str(path), "bytes": st.st_size, "sha256": sha256_of(path)}
    return FINGERPRINTS[key]


def sha256_of(path: Path) -> str:
    """The sha256 of a file as it is on disk now (hex), read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


LOOSE_JSON_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz")


def is_loose_json(path: Path) -> bool:
    """JSON lines, gzipped or not (Megatron's loose JSON; datatrove's and Dolma's .jsonl.gz/.json.gz)."""
    return path.name.lower().endswith(LOOSE_JSON_SUFFIXES)


def write_json_lines_gz(records: Iterable[dict], path: Path) -> int:
    """Write JSON lines into a gzip file (no time or name in its header, so the same records give the same
    bytes), under a temporary name; the number written."""
    count = 0
    with atomic_path(path) as tmp, open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
            count += 1
    return count


def has_lone_surrogate(value) -> bool:
    """Whether a parsed JSON value holds a string with a lone surrogate (JSON's `"\\ud800"` escape parses to
    one, though no UTF-8 text can hold it: Parquet, tokenizers and files reject it later). Encoding is the
    test: json's C encoder walks any nesting that json's decoder accepted."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


JSON_LINE_REASONS = {"undecodable": "not valid UTF-8", "invalid_json": "not valid JSON",
                     "invalid_unicode": "a lone surrogate escape (\\ud800-\\udfff), which is not text",
                     "too_large": "a line longer than the largest document taken ([input] max_document_bytes)"}


def iter_json_lines(path: Path, max_bytes: int = 0) -> Iterator[tuple[int, bytes, object, str | None]]:
    """(line number, raw line, parsed value, None) for each non-blank line of a loose JSON file (gzipped
    when its name ends in .gz), or (line number, raw line, None, reason) when the line is not valid UTF-8
    JSON (`undecodable`, `invalid_json`), holds a lone surrogate escape (`invalid_unicode`), or is longer
    than `max_bytes` (`too_large`: its first 200 bytes; 0 takes any); JSON_LINE_REASONS says each. A gzip
    file cut short is one error."""
    try:
        with gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb") as f:
            for lineno, (raw, too_large) in enumerate(bounded_lines(f, max_bytes), 1):
                if too_large:
                    yield lineno, raw, None, "too_large"
                elif raw.strip():
                    yield lineno, raw, *parsed_line(raw)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TextmillError(f"{path} is not a whole gzip file ({exc}); its lines cannot all be read") from None


def bounded_lines(f, max_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """(line, False) for each line of a binary file, or (its first 200 bytes, True) for a line longer than
    `max_bytes` without its line end: such a line is read past a block at a time, never held whole."""
    while raw := (f.readline(max_bytes + 2) if max_bytes else f.readline()):
        if not max_bytes or len(raw.rstrip(b"\r\n")) <= max_bytes:
            yield raw, False
            continue
        head = raw[:200]
        while raw and not raw.endswith(b"\n"):
            raw = f.readline(1 << 20)
        yield head, True


# A \\uD800-\\uDFFF escape: only a line with one is checked for a lone surrogate (JSON written with
# ensure_ascii escapes every non-ASCII character, and checking each such line would double its parse time).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def json_value(text: str | bytes) -> object:
    """json.loads, taking any number: an integer of more digits than Python reads (4,300, its guard against
    quadratic conversion) is kept as the string of its digits, which a field textmill reads refuses as it refuses
    any string and any other field carries on unchanged. Invalid JSON raises json.JSONDecodeError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # "Exceeds the limit (4300 digits) for integer string conversion": parsed again, only then
        return json.loads(text, parse_int=_long_int)


def _long_int(digits: str) -> int | str:
    return int(digits) if len(digits) <= sys.get_int_max_str_digits() else digits


def parsed_line(raw: bytes) -> tuple[object, str | None]:
    """A JSON line's value and None, or None and the reason it is not one (JSON_LINE_REASONS)."""
    try:
        value = json_value(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "undecodable"
    except (json.JSONDecodeError, RecursionError):
        return None, "invalid_json"
    if _SURROGATE_ESCAPE.search(raw) and has_lone_surrogate(value):  # only an escape can make one
        return None, "invalid_unicode"
    return value, None


def parquet_batches(reader, batch_rows: int, columns: list[str] | None = None) -> Iterator:
    """A Parquet file's record batches of at most `batch_rows` rows, read one row group at a time.
    (pyarrow's iter_batches over the whole file keeps memory growing with the rows read: 38 to 198 MB of
    Arrow allocations over 200,000 documents; row group by row group it stays flat.) `reader` is a
    pyarrow.parquet.ParquetFile."""
    for group in range(reader.num_row_groups):
        yield from reader.iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns)


def missing_input(path: Path) -> TextmillError:
    """The error for an input that is not a file or folder to read: what it is instead, when it is something."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        return TextmillError(f"input {path} is a symbolic link that leads nowhere (a loop, or a missing target)")
    if path.exists():
        return TextmillError(f"input {path} is not a regular file or folder (a FIFO, a socket or a device)")
    return TextmillError(f"input not found: {path}")
