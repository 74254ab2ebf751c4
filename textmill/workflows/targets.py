"""What a task writes under WORK, as Luigi Targets that know their store.

WORK is a local folder or the local mirror of one in an object store (textmill.io.store). As with Luigi's
contrib/s3.py S3Target, the Target, not the task, talks to the store, so a task body sees local paths only:

- reading: `local()` (and `local_tree()`, `record()`) make the local copy of an input current first;
- writing: the task writes local files; `commit()` uploads them, its done file last, so a worker lost
  part-way leaves no done file and nothing half-written looks finished; `exists()` asks the store.

CommandOutput wraps the target of a task that writes into a stage command's own output folder (which is
not named by a key): a key record there says which inputs and settings its files come from.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import luigi

from textmill.io.files import read_json, read_json_record, write_json
from textmill.io.store import exists as store_exists
from textmill.io.store import fetch, fetch_tree, files_under, publish, publish_tree, remove
from textmill.megatron.indexed import data_file_path, index_file_path
from textmill.pipeline.shards import earlier_or_current, shard_stem, sidecar_path
from textmill.pipeline.units import LineUnit, RowUnit


class WorkTarget(luigi.Target):
    """The files a task writes in `folder`, finished when `done` (written last) is there and, for a JSON
    record, whole: a damaged record means the task runs again. (MinHash signatures and a blacklist
    partition are their own done files: Parquet, renamed or uploaded into place whole.) `files` are named
    files written before it, `trees` folders (checkpoints, an export) published whole."""

    def __init__(self, folder: Path, done: Path, files: dict[str, Path] | None = None,
                 trees: dict[str, Path] | None = None):
        self.folder, self.done = folder, done
        self.files, self.trees = files or {}, trees or {}

    def exists(self) -> bool:
        if self.done.suffix != ".json":
            return store_exists(self.done)
        return read_json_record(self.done, "its task will run again") is not None

    def record(self) -> dict:
        """The done file's JSON (a task record or a manifest), current."""
        return read_json(self.done)

    def local(self) -> Path:
        """The done file current on this machine (the output of a task that writes one file)."""
        return fetch(self.done)

    def local_file(self, name: str) -> Path:
        """The file named `name` current on this machine."""
        return fetch(self.files[name])

    def local_tree(self, name: str) -> Path:
        """The folder named `name`, every file in it current on this machine."""
        return fetch_tree(self.trees[name])

    def written(self) -> list[Path]:
        """The files the task wrote, in the order they are published: its done file last."""
        return [*self.files.values(), self.done]

    def begin(self) -> None:
        """Before the task writes: nothing to withdraw (its done file is written last)."""

    def commit(self) -> None:
        for tree in self.trees.values():
            publish_tree(tree)
        publish(self.written())


def written_as(folder: Path, pattern: str, done: Path) -> list[Path]:
    """The files of one shard in `folder` and its hidden subfolders (those matching `pattern`: the shard,
    its rejects, its manifest): the shard first, its done file last."""
    found = [*folder.glob(pattern), *folder.glob(f".*/{pattern}")]
    return sorted(found, key=lambda p: (p == done, p.parent != folder, str(p)))


class ShardTarget(WorkTarget):
    """One shard a task writes (or a file given to it) with its sidecars (rejects, kept HTML, a journal)
    and its done file (its manifest or record; for a given file, the file itself)."""

    def __init__(self, shard: Path, done: Path, files: dict[str, Path] | None = None, pattern: str | None = None,
                 progress: Path | None = None, with_done: bool = False):
        super().__init__(shard.parent, done, files)
        self.shard, self.pattern = shard, pattern or f"{shard_stem(shard)}.*"
        self.progress = progress  # a folder of parts committed while the task runs (the scrape's chunks)
        self.with_done = with_done  # the done file is read with the shard (a cut unit's origin)

    def begin(self) -> None:
        """Resume where a task stopped, on any machine: the parts it committed made current here."""
        if self.progress:
            fetch_tree(self.progress)

    def save_progress(self, part: Path) -> None:
        """Commit one part of the task's progress (a file under `progress`) now, before the task ends."""
        publish([part])

    def commit(self) -> None:
        super().commit()
        if self.progress:  # the finished shard holds what the parts held: their objects go, then the folder
            for part in files_under(self.progress):
                remove(part)
            shutil.rmtree(self.progress, ignore_errors=True)

    def exists(self) -> bool:
        return store_exists(self.shard) if self.done == self.shard else super().exists()

    def local(self, *sidecars: str) -> Path:
        """The shard current on this machine, and the sidecars of kinds `sidecars` with it."""
        for kind in sidecars:
            fetch(earlier_or_current(sidecar_path(self.shard, kind)))
        if self.with_done:
            fetch(self.done)
        return fetch(self.shard)

    def bytes(self) -> int:
        """The shard's size: as its manifest records it, or the file's own."""
        recorded = self.record().get("bytes") if self.done != self.shard else None
        return recorded or fetch(self.shard).stat().st_size

    def written(self) -> list[Path]:
        return written_as(self.folder, self.pattern, self.done)


class UnitTarget(ShardTarget):
    """A unit of a given file: the file, there when it is, and which of its lines or rows are the unit."""

    def __init__(self, unit: LineUnit | RowUnit):
        super().__init__(unit.path, unit.path)
        self.unit = unit


class ShardSet(WorkTarget):
    """A stage finished as a whole (the shuffle, decontamination, a command's given shards): its shards, in
    order, and its record (None for given shards, finished when they are all there)."""

    def __init__(self, folder: Path | None, done: Path | None, shards: list[Path]):
        super().__init__(folder, done)
        self.shards = shards

    def exists(self) -> bool:
        return super().exists() if self.done else all(store_exists(p) for p in self.shards)

    def local_shard(self, number: int) -> Path:
        return fetch(self.shards[number])


class TokenizerTarget(WorkTarget):
    """A tokenizer's files (GPT-2's vocab.json and merges.txt, or a Hugging Face tokenizer's), written by a
    task (with its record, `done`) or given (no record: there when the files are)."""

    def __init__(self, folder: Path | None, done: Path | None, tokenizer: tuple[Path, ...],
                 trees: dict[str, Path] | None = None):
        super().__init__(folder, done, trees=trees)
        self.tokenizer = tokenizer

    def exists(self) -> bool:
        return super().exists() if self.done else all(store_exists(p) for p in self.tokenizer)

    def local_tokenizer(self) -> list[Path]:
        return [fetch(p) for p in self.tokenizer]

    def written(self) -> list[Path]:
        inside = self.trees.values()  # an imported model's tokenizer is published with its folder
        return [*(p for p in self.tokenizer if not any(t in p.parents for t in inside)), self.done]


class DatasetTarget(WorkTarget):
    """Megatron token files (PREFIX.bin and PREFIX.idx) and their record; `pattern` names every file of one
    tokenized shard (its rejects with them). A training set of the parts form has no prefix: its record's `blend`
    lists every shard's prefix with its tokens."""

    def __init__(self, folder: Path, done: Path, prefix: Path | None, pattern: str | None = None):
        super().__init__(folder, done)
        self.prefix, self.pattern = prefix, pattern

    def token_files(self) -> list[Path]:
        return [data_file_path(self.prefix), index_file_path(self.prefix)] if self.prefix else []

    def local_dataset(self) -> Path:
        for path in self.token_files():
            fetch(path)
        return self.prefix

    def checked_blend(self) -> list[tuple[int | None, Path]]:
        """The token files current on this machine, each checked against the size and sha256 its record holds (a
        file changed since it was written would train on other data unnoticed): the merged files' prefix (no
        weight), or every prefix of a blend with its tokens."""
        from textmill.errors import RunFailed
        from textmill.io.files import file_fingerprint
        from textmill.io.store import local_path, shown

        record = self.record()
        expected = record.get("files", {})
        blend = [(None, self.prefix)] if self.prefix else [(tokens, local_path(p)) for tokens, p in record["blend"]]
        for _, prefix in blend:
            for path in (data_file_path(prefix), index_file_path(prefix)):
                fetch(path)
                recorded = expected.get(path.name)
                if recorded and {k: v for k, v in file_fingerprint(path).items() if k != "path"} != \
                        {k: v for k, v in recorded.items() if k != "path"}:
                    raise RunFailed(f"{shown(path)} is not the file its task wrote (size or sha256 differ); "
                                    "delete that folder to make it again")
        return blend

    def checked_dataset(self) -> Path:
        """The merged files' prefix, checked; of a blend, its first shard's (where a held-out split is read)."""
        return self.checked_blend()[0][1]

    def data_path(self) -> tuple[str, ...]:
        """The training set as the trainer's --data-path: PREFIX, or W1 PREFIX1 W2 PREFIX2 ... (checked)."""
        return tuple(str(x) for tokens, prefix in self.checked_blend()
                     for x in ((prefix,) if tokens is None else (tokens, prefix)))

    def written(self) -> list[Path]:
        if self.pattern:
            return written_as(self.folder, self.pattern, self.done)
        return [*self.token_files(), self.done]


class ModelTarget(WorkTarget):
    """A trained model: its checkpoints folder (read with the tokenizer files its arguments name), the
    trainer's settings file and its log."""

    def __init__(self, folder: Path, done: Path, checkpoints: Path, tokenizer: tuple[Path, ...], log: Path,
                 settings: Path):
        super().__init__(folder, done, files={"settings": settings, "log": log}, trees={"checkpoints": checkpoints})
        self.tokenizer = tokenizer

    def local_checkpoints(self) -> Path:
        for path in self.tokenizer:
            fetch(path)
        return self.local_tree("checkpoints")


class CommandOutput(luigi.Target):
    """A target written into a stage command's output folder, which is not keyed: finished when it is and
    its key record (OUT/.textmill/keys/TASK.json) names the key it was written for; the record is removed
    before the task rewrites the files and written, listing them, after they are committed."""

    def __init__(self, target: WorkTarget, record: Path, task: str, key: Callable[[], str], out: Path):
        # The key is asked for only once files are there to compare it with: a task's inputs may be missing
        # until it runs, and then its own error says so.
        self.target, self.key_record, self.task, self.key, self.out = target, record, task, key, out

    def __getattr__(self, name):  # the wrapped target's files and readers
        return getattr(self.target, name)

    def exists(self) -> bool:
        if not self.target.exists():
            return False
        record = read_json_record(self.key_record, "its task will run again")
        return record is not None and record.get("key") == self.key()

    def begin(self) -> None:
        remove(self.key_record)
        self.target.begin()

    def commit(self) -> None:
        self.target.commit()
        files = [str(p.relative_to(self.out)) for p in self.target.written()]
        write_json({"task": self.task, "key": self.key(), "files": files}, self.key_record)
        publish([self.key_record])
