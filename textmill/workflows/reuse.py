"""A map stage's shard made from bytes an earlier task already made it from is taken, not made again.

Every per-unit task after dedup lies in a folder keyed by dedup's clusters, and the clusters' key changes whenever a
unit is added: a run grown by one archive would clean every old unit again, though dedup left their documents as
they were. So a reusable task (cleanup, the quality rules) records, once its shard is written, a reuse key (what
its output is made of: the stage, the shard's name, its input shard's sha256, its own settings, textmill's version)
and the folder that holds it, in WORK/.textmill/reuse/STAGE/. A later task of the same reuse key copies that output (hard
links where the disk allows) into its own folder instead of running its stage. The input's bytes decide: an input
that changed by one byte has another key, and the earlier manifest's input checksum is checked again before the
copy. The copy's manifest names the folder it came from (`reused_from`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from textmill import __version__
from textmill.io.files import local_fingerprint, read_json_record, write_json
from textmill.io.store import fetch, publish
from textmill.pipeline.shards import manifest_path, rejects_path
from textmill.workflows.memos import key_of


def reuse_key(task, given: Path) -> str:
    return key_of("reuse", task.stage, task.name(), local_fingerprint(given)["sha256"], *task.own_settings(), __version__)


def index_path(task, key: str) -> Path:
    """Beside the tasks' time and failure records, out of the stage's folder (whose subfolders are its outputs)."""
    return task.work / ".textmill" / "reuse" / task.stage / f"{key}.json"


def take_earlier(task, given: Path) -> bool:
    """Whether an earlier task made this task's shard from the same input bytes and settings: then its shard, rejects
    and manifest are copied into this task's folder, and True."""
    key = reuse_key(task, given)
    found = read_json_record(index_path(task, key), "the shard is made again")
    if not found or found.get("folder") == task.folder().name:
        return False
    earlier = task.folder().parent / found["folder"] / task.output().shard.name
    manifest = read_json_record(manifest_path(earlier), "the shard is made again")
    sha256 = local_fingerprint(given)["sha256"]
    if not manifest or [i.get("sha256") for i in manifest.get("inputs", [])] != [sha256]:
        return False
    mine = task.output().shard
    for source, target in ((earlier, mine), (rejects_path(earlier), rejects_path(mine))):
        try:
            _link_or_copy(fetch(source), target)
        except FileNotFoundError:
            return False  # removed since (a folder deleted by hand): made again
    write_json({**manifest, "inputs": [{**manifest["inputs"][0], "path": str(given)}],
                "reused_from": found["folder"]}, manifest_path(mine))
    return True


def remember(task, given: Path) -> None:
    """Record that this task's folder holds the shard made from `given` with its settings (after it is written)."""
    index = index_path(task, reuse_key(task, given))
    write_json({"folder": task.folder().name, "shard": task.name()}, index)
    publish([index])


def _link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another disk, or a file system without hard links
        shutil.copy2(source, target)
