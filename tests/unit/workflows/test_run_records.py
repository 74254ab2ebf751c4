"""What a run keeps (workflows/run_records.py): `textmill export corpus` never deletes what it did not write."""

import os

import pytest

from textmill.errors import TextmillError
from textmill.workflows.run_records import export_stage


def test_an_export_is_refused_where_the_run_keeps_its_files_and_leaves_them_as_they_were(tmp_path, monkeypatch):
    """Issue 62: `-o work` deleted the run's whole work folder, `-o urls` its URL lists, `-o` the folder above the
    run all of it; `-o .` was a traceback. Each is one error line now, and every file is still there."""
    root = tmp_path / "project"
    (root / "urls").mkdir(parents=True)
    (root / "urls" / "list.txt").write_text("http://a.example/page\n")
    (root / "work" / "1-blacklist").mkdir(parents=True)
    (root / "work" / "1-blacklist" / "kept.jsonl").write_text("{}\n")
    config = root / "run.toml"
    config.write_text("[train]\nenabled = false\n")
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"\xff\xd8")
    (tmp_path / "notes.txt").write_text("mine\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    monkeypatch.chdir(root)
    held = "the run keeps .* there; give a folder outside the run's work folder, inputs and run file"
    for output, said in [(root / "work", held), (root / "urls", held), (root / "urls" / "list.txt", held),
                         (root / "work" / "exports", held), (root, held), (tmp_path, held), (".", held),
                         ("/", held), (tmp_path / "notes.txt", "it is a file or a link"),
                         (tmp_path / "photos", "it holds files textmill did not export there")]:
        with pytest.raises(TextmillError, match=said):
            export_stage(config, None, output)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    with pytest.raises(TextmillError, match="has not finished its shuffle stage"):
        export_stage(config, None, tmp_path / "new")  # a new folder outside the run passes this check
    assert not os.path.exists(tmp_path / "new")
