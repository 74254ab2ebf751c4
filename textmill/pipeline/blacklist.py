"""URL blacklisting, after Megatron-LM's tools/openwebtext/blacklist_urls.py.

Each URL line meets these checks in order; the first that fails is its reject reason:
too_long, undecodable, too_short, malformed, control_character, bad_scheme, domain_blacklisted=<label>,
extension_blacklisted=<ext>, duplicate. (The reference drops only URLs of 8 characters or fewer; too_long and
control_character keep from the scrape what no server answers: browsers and servers stop near 2 to 8 KB. They
are fixed rules, in no key, so lists blacklisted before them are not redone.)

A list is plain text, a URL a line, or JSON lines (LIST.jsonl, compressed or not), a record a line: its `url`, and
whatever else it holds (what `textmill reddit-urls` writes: the submission's id, score, subreddit and time) kept as
the URL's `metadata`, which the scrape carries on to its document. A JSON-lines line can also be invalid_json,
invalid_unicode or no_url (a record without a string `url`). Unlike the reference, the kept URLs keep their input
order (the reference writes a set, whose order changes from run to run), URLs are normalised before the duplicate
check, and each unit of an input list (textmill.pipeline.units: at most `urls_per_shard` lines) becomes one output
shard, so a list added later leaves the shards of the earlier ones untouched.

A URL kept from an earlier unit (of its own list or an earlier one, or earlier in its own unit) is a
duplicate: the first occurrence in file order wins. That check is map/reduce, so that many workers share
it and none holds every URL: `check_unit` applies the rules to one unit and sorts the ids that passed by
the partition their hash falls in; `find_duplicates` goes through one partition of every unit in order,
the first occurrence winning; `blacklist_shard` writes one unit's shard with the duplicates the
partitions found in it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import itertools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.parquet as pq
import tldextract

from textmill.errors import TextmillError
from textmill.io.files import atomic_path, given_files, parsed_line, read_json_record, unique_names, write_json
from textmill.pipeline.shards import URL_SCHEMA, ShardOutput, reject_schema, write_table
from textmill.pipeline.stage_configs import BlacklistConfig
from textmill.pipeline.units import OPENERS, LineUnit, read_unit_lines, url_list_name

# The bundled public-suffix snapshot, never fetched: runs must work offline.
_TLD = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
DUPLICATE_ROW_GROUP = 4096  # rows of a partition's duplicates per row group
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_TLD_LABEL = re.compile(r"^(?:[a-z]{2,63}|xn--[a-z0-9-]{2,59})$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_URL_BYTES = 8192  # a longer line is no URL (one of 100 MB took 1.1 GB and a minute to check)
SHOWN_BYTES = 200  # what a too_long reject keeps of its line
MAX_JSON_LIST_LINE_BYTES = 1 << 16  # a JSON-lines list's line: its URL and what comes with it


def _read_list(lines: Iterable[str]) -> list[str]:
    return [s.strip().lower() for s in lines if s.strip() and not s.lstrip().startswith("#")]


def _bundled(name: str) -> list[str]:
    return _read_list(resources.files("textmill.pipeline").joinpath("data", name).read_text().splitlines())


@dataclass(frozen=True)
class UrlRules:
    domains: frozenset[str] = field(default_factory=lambda: frozenset(_bundled("domain_blacklist.txt")))
    extensions: tuple[str, ...] = field(default_factory=lambda: tuple(_bundled("extension_blacklist.txt")))
    min_length: int = 9  # URLs of 8 characters or fewer are rejected, as in the reference

    @classmethod
    def with_extra(cls, config: BlacklistConfig) -> "UrlRules":
        """Megatron-LM's lists (bundled), extended by textmill's broader ones when asked and by the user's files."""
        base = cls()
        domains = set(base.domains)
        extensions = list(base.extensions)
        if config.broader_lists:
            domains.update(_bundled("broader_domain_blacklist.txt"))
            extensions.extend(_bundled("broader_extension_blacklist.txt"))
        for path in config.domain_blacklist:
            domains.update(_read_list(_read_text(path).splitlines()))
        for path in config.extension_blacklist:
            extensions.extend(e if e.startswith(".") else "." + e for e in _read_list(_read_text(path).splitlines()))
        return cls(domains=frozenset(domains), extensions=tuple(dict.fromkeys(extensions)))

    def params(self) -> dict:
        return {
            "domains_sha256": hashlib.sha256("\n".join(sorted(self.domains)).encode()).hexdigest(),
            "extensions_sha256": hashlib.sha256("\n".join(self.extensions).encode()).hexdigest(),
            "min_length": self.min_length,
        }


def _read_text(path: Path) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise TextmillError(f"cannot read blacklist file {path}: {exc.strerror}") from None


def url_id(url: str) -> str:
    """The stable document id: 16 hex digits of the BLAKE2b hash of the normalised URL."""
    return hashlib.blake2b(url.encode("utf-8"), digest_size=8).hexdigest()


def _valid_host(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
        return True
    except ValueError:
        pass
    try:
        labels = host.encode("idna").decode("ascii").split(".")
    except UnicodeError:
        return False
    return len(labels) >= 2 and all(_LABEL.match(x) for x in labels[:-1]) and bool(_TLD_LABEL.match(labels[-1]))


def normalize_url(url: str) -> tuple[str | None, str | None]:
    """(normalised URL, None) or (None, reason). Lower-cases scheme and host, drops the fragment and a
    default port, and gives an empty path '/' so that trivially different spellings count as duplicates."""
    if any(c.isspace() for c in url):
        return None, "malformed"
    if _CONTROL.search(url):
        return None, "control_character"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None, "malformed"
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        return None, "bad_scheme" if scheme else "malformed"
    if not url[len(scheme) :].startswith("://"):
        return None, "malformed"
    host = (parts.hostname or "").rstrip(".")
    if not host or parts.username is not None or not _valid_host(host):
        return None, "malformed"
    netloc = host if port is None or port == {"http": 80, "https": 443}[scheme] else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, "")), None


def check_url(url: str, rules: UrlRules) -> tuple[str | None, str | None]:
    """(normalised URL, None) if the URL passes every rule but the duplicate check, else (None, reason)."""
    if len(url) < rules.min_length:
        return None, "too_short"
    normalized, reason = normalize_url(url)
    if reason:
        return None, reason
    label = _TLD(normalized).domain.lower()
    if label in rules.domains:
        return None, f"domain_blacklisted={label}"
    path = urlsplit(normalized).path.lower()
    for ext in rules.extensions:
        if path.endswith(ext):
            return None, f"extension_blacklisted={ext}"
    return normalized, None


def is_json_list(path: Path) -> bool:
    """Whether a URL list is JSON lines ({"url": ..., other fields}), by its name: LIST.jsonl, compressed or not."""
    name = path.name.lower()
    return any(name.endswith(".jsonl" + suffix) for suffix in ("", *OPENERS))


def plain_url(raw: bytes) -> tuple[str, None, str | None]:
    """A plain list's line: (the URL, no metadata, None), or (what is shown of the line, None, its reject reason)."""
    if len(raw.strip()) > MAX_URL_BYTES:
        return raw[:SHOWN_BYTES].decode("utf-8", "backslashreplace"), None, "too_long"
    try:
        return raw.decode("utf-8").strip(), None, None
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace"), None, "undecodable"


def listed_url(raw: bytes) -> tuple[str, str | None, str | None]:
    """A JSON-lines list's line, {"url": ..., other fields}: (the URL, the other fields as a JSON object or None,
    None), or (what is shown of the line, None, its reject reason)."""
    if len(raw) > MAX_JSON_LIST_LINE_BYTES:
        return raw[:SHOWN_BYTES].decode("utf-8", "backslashreplace"), None, "too_long"
    record, reason = parsed_line(raw)
    if reason:  # undecodable, invalid_json or invalid_unicode
        return raw[:SHOWN_BYTES].decode("utf-8", "backslashreplace"), None, reason
    url = record.get("url") if isinstance(record, dict) else None
    if not isinstance(url, str):
        return raw[:SHOWN_BYTES].decode("utf-8", "backslashreplace"), None, "no_url"
    if len(url.encode("utf-8")) > MAX_URL_BYTES:
        return url[:SHOWN_BYTES], None, "too_long"
    rest = {key: value for key, value in record.items() if key != "url"}
    return url.strip(), json.dumps(rest, ensure_ascii=False, separators=(",", ":")) if rest else None, None


def checked_record(checked: Path) -> Path:
    return checked.with_name(checked.name.removesuffix(".parquet") + ".json")


def partition_of(uid: str, partitions: int) -> int:
    return int(uid[:8], 16) % partitions  # ids are hex digests: their first bits are already uniform


def check_unit(unit: LineUnit, output: Path, rules: UrlRules, partitions: int) -> dict:
    """Step 1, per unit: every line checked against the rules, in input order, into `output` (URL rows
    with their reject reason, if any; a repeat within the unit is a duplicate already), then the ids that
    passed in a second file, sorted by the partition their id falls in (one row group each), then the
    record of both (written last). Returns the record."""
    rows, blank, seen = [], 0, set()
    read_line = listed_url if is_json_list(unit.path) else plain_url
    for lineno, raw in read_unit_lines(unit):
        source = f"{unit.path.name}:{lineno}"
        if not raw.strip():
            blank += 1  # not a record; counted in the manifest
            continue
        url, metadata, reason = read_line(raw)
        if reason:
            rows.append({"id": None, "url": url, "source": source, "metadata": metadata, "reason": reason})
            continue
        normalized, reason = check_url(url, rules)
        if reason:
            rows.append({"id": None, "url": url, "source": source, "metadata": metadata, "reason": reason})
            continue
        uid = url_id(normalized)
        rows.append({"id": uid, "url": normalized, "source": source, "metadata": metadata,
                     "reason": "duplicate" if uid in seen else None})
        seen.add(uid)
    write_table(pa.Table.from_pylist(rows, schema=reject_schema(URL_SCHEMA)), output)
    passed = [(partition_of(r["id"], partitions), r["id"], n) for n, r in enumerate(rows) if r["reason"] is None]
    passed.sort()
    ids = pa.table({"id": pa.array([p[1] for p in passed], pa.string()),
                    "position": pa.array([p[2] for p in passed], pa.int64())})
    groups: dict[str, int] = {}
    with atomic_path(ids_path(output)) as tmp:
        with pq.ParquetWriter(tmp, ids.schema, compression="zstd") as writer:
            start = 0
            for part, members in itertools.groupby(p[0] for p in passed):
                count = len(list(members))
                writer.write_table(ids.slice(start, count), row_group_size=count)
                groups[str(part)] = len(groups)
                start += count
    record = {"input": unit.record(), "rows": len(rows), "blank_lines": blank, "partitions": partitions,
              "row_groups": groups}
    write_json(record, checked_record(output))
    return record


def ids_path(checked: Path) -> Path:
    return checked.with_name(checked.name.removesuffix(".parquet") + ".ids.parquet")


def find_duplicates(checked_files: list[Path], partition: int, output: Path) -> int:
    """Step 2, per partition: the URLs of this partition seen in an earlier unit, as (unit, position)
    rows sorted by both, into `output`. The first occurrence in file order wins. Memory: one partition's
    ids. Returns how many duplicates it found."""
    seen: set[str] = set()
    files, positions = [], []
    for number, checked in enumerate(checked_files):
        record = read_json_record(checked_record(checked), "check that URL list again")
        if record is None:
            raise TextmillError(f"{checked} has no whole record; check that URL list again")
        group = record["row_groups"].get(str(partition))
        if group is None:
            continue
        part = pq.ParquetFile(ids_path(checked)).read_row_group(group)
        for uid, position in zip(part["id"].to_pylist(), part["position"].to_pylist(), strict=True):
            if uid in seen:
                files.append(number)
                positions.append(position)
            else:
                seen.add(uid)
    order = sorted(range(len(files)), key=lambda k: (files[k], positions[k]))
    # Small row groups: each unit's shard reads only its own rows, found by the groups' statistics.
    with atomic_path(output) as tmp:
        pq.write_table(pa.table({"unit": pa.array([files[k] for k in order], pa.int32()),
                                 "position": pa.array([positions[k] for k in order], pa.int64())}),
                       tmp, compression="zstd", row_group_size=DUPLICATE_ROW_GROUP)
    return len(files)


def blacklist_shard(checked: Path, number: int, duplicate_files: list[Path], output: Path, rules: UrlRules) -> dict:
    """Step 3, per unit (number `number` of the run's): its shard, as one pass over every list would write
    it: the URLs that passed the rules and were not seen in an earlier unit are kept, in input order.
    Returns the manifest."""
    repeated = set()
    for part in duplicate_files:
        table = pq.read_table(part, filters=[("unit", "=", number)])
        repeated.update(table["position"].to_pylist())
    record = read_json_record(checked_record(checked), "check that URL list again")
    table = pq.read_table(checked)
    with ShardOutput("blacklist", output, URL_SCHEMA, [checked], rules.params()) as stage:
        for position, row in enumerate(table.to_pylist()):
            reason = row.pop("reason") or ("duplicate" if position in repeated else None)
            if reason:
                stage.reject(row, reason)
            else:
                stage.keep(row)
        return stage.finish(table.num_rows, blank_lines=record["blank_lines"], unit=record["input"])


def url_list_files(inputs: Iterable[str | Path]) -> list[Path]:
    """Files given directly, and the URL lists (.txt, .jsonl and compressed) inside given directories, sorted."""
    return unique_names(given_files(inputs, (".txt", ".jsonl", *OPENERS), "URL lists"), url_list_name, "inputs")
