"""Files every room writes and reads back: atomic writes, damaged records reported once and read as missing,
fingerprints that follow a file's content."""

import hashlib
from pathlib import Path

import pytest

from textmill.errors import TextmillError
from textmill.io.files import (
    EXPORT_MARKER,
    atomic_folder,
    atomic_path,
    local_fingerprint,
    read_json_record,
    write_json,
)


def test_a_write_that_fails_leaves_neither_the_file_nor_its_temporary(tmp_path):
    target = tmp_path / "sub" / "record.json"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")
    assert list(target.parent.iterdir()) == []
    write_json({"b": 1, "a": [1, 2]}, target)
    assert target.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'  # sorted keys: the same bytes each time
    assert [p.name for p in target.parent.iterdir()] == ["record.json"]


def test_a_folder_is_replaced_whole_or_not_at_all(tmp_path):
    """An export or a checkpoint is written in a hidden folder that takes the old one's place only when
    whole: a failure part-way leaves the old folder as it was, and no hidden folder behind."""
    with atomic_folder(tmp_path / "out") as tmp:
        (tmp / "old.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_folder(tmp_path / "out") as tmp:
            (tmp / "new.txt").write_text("half")
            raise RuntimeError("killed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and (tmp_path / "out" / "old.txt").exists()
    with atomic_folder(tmp_path / "out") as tmp:
        (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [EXPORT_MARKER, "new.txt"]


def test_an_export_takes_only_a_new_or_empty_folder_or_an_earlier_export(tmp_path):
    """Issue 62: an export replaced its folder whole, whatever it held. A folder holding files textmill did not
    export there, a file, a link, or the root is refused in one line and left as it was."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("years of work")
    (tmp_path / "file").write_text("a file")
    (tmp_path / "link").symlink_to(tmp_path / "mine")
    for path, said in [(tmp_path / "mine", "it holds files textmill did not export there"),
                       (tmp_path / "file", "it is a file or a link"), (tmp_path / "link", "it is a file or a link"),
                       (Path("/"), "give a folder of its own")]:
        with pytest.raises(TextmillError, match=said):
            with atomic_folder(path) as tmp:
                (tmp / "x").write_text("x")
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "years of work"
    assert (tmp_path / "file").read_text() == "a file" and (tmp_path / "link").is_symlink()
    (tmp_path / "empty").mkdir()
    with atomic_folder(tmp_path / "empty") as tmp:
        (tmp / "x").write_text("x")
    assert (tmp_path / "empty" / "x").exists()


def test_a_damaged_record_is_said_once_and_read_as_missing(tmp_path, capsys):
    assert read_json_record(tmp_path / "nothing.json", "its task will run again") is None
    record = tmp_path / "manifest.json"
    write_json({"counts": {"kept": 3}}, record)
    assert read_json_record(record, "its task will run again") == {"counts": {"kept": 3}}
    record.write_bytes(record.read_bytes()[:9])  # cut short, as by a full disk
    for _ in range(3):
        assert read_json_record(record, "its task will run again") is None
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe{}")
    assert read_json_record(tmp_path / "binary.json", "ignored") is None
    assert capsys.readouterr().err.splitlines() == [
        f"textmill: {record} is damaged (not a whole JSON object); its task will run again",
        f"textmill: {tmp_path / 'binary.json'} is damaged (UnicodeDecodeError); ignored"]


def test_a_fingerprint_is_the_contents_sha256_and_follows_a_change(tmp_path):
    path = tmp_path / "urls.txt"
    path.write_text("http://a.example/\n")
    first = local_fingerprint(path)
    assert first == {"path": str(path), "bytes": 18, "sha256": hashlib.sha256(b"http://a.example/\n").hexdigest()}
    path.write_text("http://b.example/page\n")
    assert local_fingerprint(path)["sha256"] == hashlib.sha256(b"http://b.example/page\n").hexdigest()
