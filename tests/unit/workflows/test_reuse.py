"""The reuse rule of map stages (workflows/reuse.py): an earlier shard is taken only when its input's bytes and the
task's settings are those it was made from."""

import json
from dataclasses import dataclass
from pathlib import Path

from textmill.io.files import local_fingerprint
from textmill.pipeline.shards import manifest_path, rejects_path
from textmill.workflows.reuse import remember, take_earlier


@dataclass
class Output:
    shard: Path

    def written(self) -> list[Path]:
        return [self.shard, rejects_path(self.shard), manifest_path(self.shard)]


class CleanTask:
    """What reuse reads of a task: its stage, shard name, own settings, folder and output shard."""

    stage = "4-clean"

    def __init__(self, work: Path, key: str, settings: dict):
        self._folder, self._settings = work / self.stage / key, settings

    def reuse_name(self) -> str:
        return "RS_0-00000"

    def reuse_settings(self) -> tuple:
        return (self._settings,)

    def reuse_inputs(self) -> list[Path]:
        return [self.given]

    def folder(self) -> Path:
        return self._folder

    @property
    def work(self) -> Path:
        return self._folder.parent.parent

    def output(self) -> Output:
        return Output(self._folder / "RS_0-00000.parquet")


def made(task: CleanTask, given: Path) -> None:
    """The files a cleanup task writes, then its reuse record."""
    shard = task.output().shard
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"kept rows")
    rejects_path(shard).parent.mkdir()
    rejects_path(shard).write_bytes(b"rejected rows")
    manifest_path(shard).parent.mkdir()
    manifest_path(shard).write_text(json.dumps({"inputs": [{**local_fingerprint(given)}], "counts": {"kept": 1}}))
    task.given = given
    remember(task)


def test_the_same_input_bytes_and_settings_take_the_earlier_shard(tmp_path):
    given = tmp_path / "dedup" / "RS_0-00000.parquet"
    given.parent.mkdir()
    given.write_bytes(b"deduplicated rows")
    made(CleanTask(tmp_path, "first", {"min_tokens": 128}), given)
    later = CleanTask(tmp_path, "second", {"min_tokens": 128})
    again = tmp_path / "dedup2" / "RS_0-00000.parquet"  # another folder, the same bytes
    again.parent.mkdir()
    again.write_bytes(b"deduplicated rows")
    assert take_earlier(later, [again])
    shard = later.output().shard
    assert shard.read_bytes() == b"kept rows" and rejects_path(shard).read_bytes() == b"rejected rows"
    manifest = json.loads(manifest_path(shard).read_text())
    assert manifest["reused_from"] == "first" and manifest["inputs"][0]["path"] == str(again)
    assert manifest["counts"] == {"kept": 1}


def test_a_changed_byte_or_setting_is_never_reused(tmp_path):
    given = tmp_path / "RS_0-00000.parquet"
    given.write_bytes(b"deduplicated rows")
    first = CleanTask(tmp_path, "first", {"min_tokens": 128})
    made(first, given)
    assert not take_earlier(CleanTask(tmp_path, "other", {"min_tokens": 64}), [given])  # other settings
    assert not take_earlier(first, [given])  # its own folder is no earlier output
    changed = tmp_path / "changed.parquet"
    changed.write_bytes(b"deduplicated rowz")
    assert not take_earlier(CleanTask(tmp_path, "second", {"min_tokens": 128}), [changed])

    # The index says the bytes match, the earlier manifest does not (a folder rewritten since): made again.
    manifest = manifest_path(first.output().shard)
    manifest.write_text(json.dumps({"inputs": [{"path": str(given), "sha256": "0" * 64}]}))
    assert not take_earlier(CleanTask(tmp_path, "third", {"min_tokens": 128}), [given])
