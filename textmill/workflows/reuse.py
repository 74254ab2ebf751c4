"""A task's output made from bytes an earlier task already made it from is taken, not made again.

Every task after dedup lies in a folder keyed by dedup's clusters, and the clusters' key changes whenever a unit is
added: a run grown by one archive would filter, clean, shuffle and tokenize every old unit again, though their
documents are as they were. So a reusable task (RunTask.reusable: its `reuse_inputs()` name the local files its output
is made from; dedup's filter, cleanup, the quality rules, the shuffle's scatter and gather, decontamination's passes,
tokenization) records, once its output is committed, a reuse key (its stage, its name, its inputs' sha256, its
`reuse_settings()`, textmill's version) with the folder and files that hold it, in WORK/.textmill/reuse/STAGE/. A
later task of the same reuse key copies those files (hard links where the disk allows) into its own folder instead of
making them.

The inputs' bytes decide: an input that changed by one byte gives another key, and where the earlier done file
records its inputs' checksums (a shard's manifest: its documents' files, listed first) they are checked again before
the copy. The copy's done file names the folder it came from (`reused_from`), which is how a stage's record counts
the tasks it did not redo.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from textmill import __version__
from textmill.io.files import local_fingerprint, read_json_record, write_json
from textmill.io.store import fetch, publish
from textmill.workflows.memos import key_of


def reuse_key(task, inputs: list[Path]) -> str:
    shas = [local_fingerprint(p)["sha256"] for p in inputs]
    return key_of("reuse", task.stage, task.reuse_name(), shas, *task.reuse_settings(), __version__)


def index_path(task, key: str) -> Path:
    """Beside the tasks' time and failure records, out of the stage's folder (whose subfolders are its outputs)."""
    return task.work / ".textmill" / "reuse" / task.stage / f"{key}.json"


def take_earlier(task, inputs: list[Path]) -> bool:
    """Whether an earlier task made this task's output from the same input bytes and settings: then its files are
    copied into this task's folder (its done file last, naming where they came from), and True."""
    found = read_json_record(index_path(task, reuse_key(task, inputs)), "the output is made again")
    here = task.folder()
    if not found or found.get("folder") == here.name:
        return False
    there = here.parent / found["folder"]
    *files, done = [Path(name) for name in found["files"]]
    record = read_json_record(there / done, "the output is made again")
    if not record:
        return False
    # Where the done file names the same files as its inputs (a shard's manifest: its documents' files, listed first),
    # their checksums are checked again; a task that records other inputs (a gather, its scatters' records) is not.
    entries = record.get("inputs", [])
    same = [i for i, (entry, given) in enumerate(zip(entries, inputs, strict=False))
            if Path(entry.get("path", "")).name == given.name]
    if any(entries[i].get("sha256") != local_fingerprint(inputs[i])["sha256"] for i in same):
        return False
    for name in files:
        try:
            _link_or_copy(fetch(there / name), here / name)
        except FileNotFoundError:
            return False  # removed since (a folder deleted by hand): made again
    for i in same:  # the copy's manifest names its own inputs' paths
        entries[i] = {**entries[i], "path": str(inputs[i])}
    write_json({**record, "reused_from": found["folder"]}, here / done)
    return True


def remember(task) -> None:
    """Record that this task's folder holds the output made from its inputs with its settings (once committed)."""
    here = task.folder()
    index = index_path(task, reuse_key(task, task.reuse_inputs()))
    write_json({"folder": here.name, "files": [str(p.relative_to(here)) for p in task.output().written()]}, index)
    publish([index])


def was_reused(done: Path) -> bool:
    """Whether the done file (a manifest or a task record) is that of an output taken from an earlier task's."""
    return "reused_from" in (read_json_record(done, "ignored") or {})


def _link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another disk, or a file system without hard links
        shutil.copy2(source, target)
