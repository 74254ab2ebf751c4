"""Files in object storage (s3://, gs://, abfs://, hdfs://: anything fsspec reaches), seen as local paths.

A URL is read and written through a local mirror: `s3://bucket/work/x` is the path
CACHE/s3/bucket/work/x, where CACHE is $TEXTMILL_CACHE (default ~/.cache/textmill). Every other room
keeps working on `Path`s, local and bounded by a shard; only this module talks to the store:

- `fetch(path)` makes the local copy of a mirrored path current (one metadata request; a download when
  the object changed) and returns the path; an object that is not in the store is FileNotFoundError, and
  a local copy of it is dropped, since nothing but the store says what is finished.
- Inside `listed_folders()`, whether an object exists and which version the store holds are read from one
  listing of its folder (a LIST request per 1,000 keys), taken the first time the folder is asked about,
  instead of a request per object: a walk over thousands of tasks asks about thousands of done files.
- `publish(paths)` uploads local files in the order given. Object stores have no rename, but each object
  appears whole or not at all, so the commit protocol is the order: a task publishes its data files
  first and its done file (manifest) last; a worker killed mid-upload leaves no done file, and the task
  runs again, writing the same names over what it left.
- A local path outside the mirror is an ordinary file: fetch returns it, publish does nothing.

Credentials and endpoints come from the standard places (for S3: AWS_ENDPOINT_URL, AWS_PROFILE, the
credential chain); `configure` adds fsspec storage options per protocol ([storage.PROTOCOL] in a run
file). Imports nothing of textmill.
"""

from __future__ import annotations

import functools
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://(.+)$")
OPTIONS: dict[str, dict] = {}  # fsspec storage options by protocol
# While listed_folders() is active: (the roots' keys, {listed prefix: {object key: version}}), innermost last.
LISTINGS: list[tuple[list[str], dict[str, dict[str, str]]]] = []


def cache_root() -> Path:
    return _cache_root(os.environ.get("TEXTMILL_CACHE"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=8)
def _cache_root(setting: str | None, home: str | None) -> Path:
    return Path(setting or Path.home() / ".cache" / "textmill").expanduser().resolve()


def is_url(text: str) -> bool:
    """Whether `text` names an object in a store (file:// is a local path)."""
    match = _URL.match(text)
    return bool(match) and match.group(1) != "file"


def local_path(text: str) -> Path:
    """The local path of a path or URL: a store's URL maps into the mirror, file:// to its path."""
    match = _URL.match(text)
    if not match:
        return Path(text)
    protocol, rest = match.groups()
    if protocol == "file":
        return Path(rest if rest.startswith("/") else "/" + rest)
    parts = [p for p in rest.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"{text}: not a path in a store")
    return cache_root().joinpath(protocol, *parts)


def url_of(path: Path) -> str | None:
    """The URL a mirrored path stands for, or None for a local file."""
    whole = os.path.join(os.getcwd(), path)
    folder, name = os.path.split(whole)
    if name in ("", ".", "..") or os.path.islink(whole):  # its own name a link (or a step): where it leads decides
        real = os.path.realpath(whole)
    else:
        real = os.path.join(_real_folder(folder), name)
    root = f"{cache_root()}{os.sep}"
    if not real.startswith(root):
        return None
    protocol, _, rest = real[len(root):].partition(os.sep)
    return f"{protocol}://{rest}" if rest else None


@functools.lru_cache(maxsize=1 << 12)  # every task asks of its files, many times: resolving a folder is system calls
def _real_folder(folder: str) -> str:
    return os.path.realpath(folder)


def shown(path: Path) -> str:
    """How a path is named to a person: the URL for a mirrored one."""
    return url_of(path) or str(path)


def configure(options: dict[str, dict]) -> None:
    """fsspec storage options by protocol (endpoint, profile, anything the filesystem takes)."""
    OPTIONS.clear()
    OPTIONS.update(options)


def filesystem(url: str):
    """The fsspec filesystem of a URL's protocol, and the URL's path within it. (fsspec keeps one instance
    per protocol and options, and a new one in a forked worker, whose parent's event loop is gone.)"""
    import fsspec

    protocol = _URL.match(url).group(1)
    fs = fsspec.filesystem(protocol, **OPTIONS.get(protocol, {}))
    return fs, fs._strip_protocol(url)


def _version_file(path: Path) -> Path:
    """Beside a mirrored file, the store's version of the object its local copy holds (a hidden file)."""
    return path.with_name(f".{path.name}.version")


def version_of(info: dict) -> str:
    """An object's version as the store describes it, the same whether a HEAD or a LIST did (the two describe
    an object with different fields): its entity tag (S3, Azure), generation (GCS) or, failing those, its
    modification time, and its size."""
    tag = next((info[k] for k in ("ETag", "etag", "generation", "md5Hash") if info.get(k)), None)
    return f"{tag or info.get('LastModified') or info.get('mtime') or info.get('created')}:{info.get('size')}"


@contextmanager
def listed_folders(*roots: Path) -> Iterator[None]:
    """Inside, existence and versions come from listings (what the block writes or removes is kept in them): a
    file under one of `roots` (WORK) from one recursive listing of its top folder there (a stage: the keyed
    folders of all its tasks at once), a file elsewhere from a listing of its own folder. The answers are as
    fresh as the listings, so use it for walks over many tasks, and ask the store itself (outside) where a
    stale answer would matter. A block inside another shares its listings and adds its roots."""
    keys = [filesystem(url)[1] for url in map(url_of, roots) if url is not None]
    outer_roots, listings = LISTINGS[-1] if LISTINGS else ([], {})
    LISTINGS.append(([*outer_roots, *keys], listings))
    try:
        yield
    finally:
        LISTINGS.pop()


def _covering(key: str) -> tuple[str, bool]:
    """The prefix whose listing answers for `key` inside listed_folders(), and whether it is listed recursively."""
    for root in LISTINGS[-1][0]:
        if key.startswith(root + "/"):
            top, _, rest = key[len(root) + 1:].partition("/")
            return (f"{root}/{top}", True) if rest else (root, False)
    return key.rsplit("/", 1)[0], False


def _listing(fs, key: str) -> dict[str, str] | None:
    """The versions of the objects of the listing that answers for `key`, listed once inside listed_folders();
    None outside."""
    if not LISTINGS:
        return None
    prefix, recursive = _covering(key)
    listings = LISTINGS[-1][1]
    if prefix not in listings:
        fs.invalidate_cache(prefix)
        try:
            entries = fs.find(prefix, maxdepth=None if recursive else 1, detail=True).values()
        except FileNotFoundError:
            entries = []
        listings[prefix] = {entry["name"]: version_of(entry) for entry in entries if entry.get("type") == "file"}
    return listings[prefix]


def _version(fs, key: str) -> str:
    """The store's version of an object (FileNotFoundError when it has none)."""
    listing = _listing(fs, key)
    if listing is not None:
        if key not in listing:
            raise FileNotFoundError(key)
        return listing[key]
    fs.invalidate_cache(key)
    info = fs.info(key)
    if info["type"] != "file":
        raise FileNotFoundError(key)
    return version_of(info)


def _listed(key: str, version: str | None) -> None:
    """What this process wrote (its version) or removed (None), kept in the listing that answers for it."""
    listing = LISTINGS[-1][1].get(_covering(key)[0]) if LISTINGS else None
    if listing is not None:
        if version is None:
            listing.pop(key, None)
        else:
            listing[key] = version


def _record_version(path: Path, version: str) -> None:
    _version_file(path).write_text(version)


def _is_current(path: Path, version: str) -> bool:
    """Whether the local copy is the store's object at `version`."""
    marker = _version_file(path)
    return path.is_file() and marker.is_file() and marker.read_text() == version


def fetch(path: Path) -> Path:
    """`path`, with its local copy current when it is mirrored (FileNotFoundError when the store lacks it)."""
    url = url_of(path)
    if url is None:
        return path
    fs, key = filesystem(url)
    try:
        version = _version(fs, key)
    except FileNotFoundError:
        for stale in (path, _version_file(path)):
            stale.unlink(missing_ok=True)
        raise FileNotFoundError(url) from None
    if _is_current(path, version):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.download-{os.getpid()}")
    try:
        fs.get_file(key, str(partial))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    _record_version(path, version)
    return path


@contextmanager
def open_ranged(path: Path) -> Iterator[Path | BinaryIO]:
    """A file to read part of (a Parquet row group): the local copy when it is the store's current one,
    else the object opened for ranged reads, so only the parts read are downloaded."""
    url = url_of(path)
    if url is None:
        yield path
        return
    fs, key = filesystem(url)
    if _is_current(path, _version(fs, key)):
        yield path
        return
    with fs.open(key, "rb") as f:
        yield f


def version_stamp(path: Path) -> str:
    """What tells this version of a file from another without reading it: a mirrored file's version in its
    store (as last fetched), a local file's size and modification time."""
    marker = _version_file(path)
    if url_of(path) is not None and marker.is_file():
        return marker.read_text()
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns}"


def exists(path: Path) -> bool:
    """Whether the file is there: in the store, for a mirrored path."""
    url = url_of(path)
    if url is None:
        return path.exists()
    fs, key = filesystem(url)
    try:
        _version(fs, key)
    except FileNotFoundError:
        return False
    return True


def publish(paths: Iterable[Path]) -> None:
    """Upload mirrored files to the store in the order given (put the done file last); local files stay."""
    for path in paths:
        url = url_of(path)
        if url is None:
            continue
        fs, key = filesystem(url)
        fs.put_file(str(path), key)
        fs.invalidate_cache(key)
        version = version_of(fs.info(key))
        _record_version(path, version)
        _listed(key, version)


def remove(path: Path) -> None:
    """Delete a file, and its object when mirrored (nothing when it is not there)."""
    path.unlink(missing_ok=True)
    url = url_of(path)
    if url is not None:
        fs, key = filesystem(url)
        if exists(path):
            fs.rm_file(key)
            _listed(key, None)
        _version_file(path).unlink(missing_ok=True)


def files_under(folder: Path) -> list[Path]:
    """Every file under a folder (in the store, for a mirrored one), as local paths, sorted."""
    url = url_of(folder)
    if url is None:
        return files_under_locally(folder)
    fs, key = filesystem(url)
    fs.invalidate_cache(key)
    try:
        found = fs.find(key)
    except FileNotFoundError:
        return []
    return sorted(folder / Path(k).relative_to(key) for k in found)


def fetch_tree(folder: Path) -> Path:
    """Every file under a mirrored folder made current locally (a checkpoint folder, earlier run records)."""
    for path in files_under(folder) if url_of(folder) else ():
        fetch(path)
    return folder


def fetch_file_or_tree(path: Path) -> Path:
    """A mirrored input named by a person: one object, or every object under that prefix."""
    return fetch(path) if exists(path) else fetch_tree(path)


def publish_tree(folder: Path) -> None:
    """Upload every file under a mirrored folder whose local copy is not the store's already."""
    if url_of(folder) is None:
        return
    for path in files_under_locally(folder):
        marker = _version_file(path)
        if not marker.is_file() or marker.stat().st_mtime_ns < path.stat().st_mtime_ns:
            publish([path])


def files_under_locally(folder: Path) -> list[Path]:
    """Every file under a local folder but temporary files (.NAME.tmp-PID) and the mirror's version notes."""
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and not (p.name.startswith(".") and re.search(r"\.(version|tmp-\d+)$", p.name)))
