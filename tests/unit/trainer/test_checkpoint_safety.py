"""Loading a checkpoint never runs code from its folder (sharded metadata pointing outside it is refused) and
never reads one damaged since it was written; a sharded checkpoint still loads."""

import io
import json
import os
import pickle
import re
import shutil

import pytest
import torch

from textmill.errors import TextmillError
from textmill.trainer.checkpoint import load_checkpoint, load_model
from textmill.trainer.dcp_metadata import SafeMetadataUnpickler


def test_metadata_pointing_outside_its_folder_is_refused(dist_ckpt):
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    folder = load_checkpoint(dist_ckpt).path
    metadata = SafeMetadataUnpickler(io.BytesIO((folder / ".metadata").read_bytes())).load()
    key = next(iter(metadata.storage_data))
    metadata.storage_data[key] = _StorageInfo("../../elsewhere.distcp", 0, 10)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(TextmillError, match="outside its own"):
        load_model(dist_ckpt)


def test_a_sharded_checkpoint_still_loads(dist_ckpt, gpt2_ckpt):
    a, _ = load_model(gpt2_ckpt)
    b, ckpt = load_model(dist_ckpt)
    assert ckpt.format == "torch_dist"
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def flip_bytes(file, count=50):
    """`count` bytes in the middle of `file` inverted, its size and mtime unchanged (damage on disk)."""
    data = bytearray(file.read_bytes())
    middle = len(data) // 2
    for i in range(middle, middle + count):
        data[i] ^= 0xFF
    stat = file.stat()
    file.write_bytes(bytes(data))
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize("fmt", ["torch", "torch_dist"])
def test_a_checkpoint_damaged_on_disk_is_refused_naming_the_file(fmt, gpt2_ckpt, dist_ckpt, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(gpt2_ckpt if fmt == "torch" else dist_ckpt, root)
    folder = load_checkpoint(root).path
    weights = max((p for p in folder.rglob("*") if p.is_file() and p.name != "textmill.json"),
                  key=lambda p: p.stat().st_size)
    flip_bytes(weights)
    with pytest.raises(TextmillError, match=f"^{re.escape(str(weights))}: damaged, its sha256 differs"):
        load_model(root)
    weights.write_bytes(weights.read_bytes()[:-1])
    with pytest.raises(TextmillError, match="damaged, [0-9]+ bytes where [0-9]+ were written"):
        load_model(root)
    weights.unlink()
    with pytest.raises(TextmillError, match="missing from the checkpoint" if fmt == "torch_dist" else "holds no checkpoint"):
        load_model(root)


def test_a_checkpoint_without_its_files_record_loads_with_one_warning_that_it_is_unverified(gpt2_ckpt, tmp_path, capsys):
    """Written before textmill recorded its files, or the record lost (issue 62: no `files`, `{}` or `null` loaded
    damaged weights without a word): it loads, saying once that nothing was verified."""
    root = tmp_path / "old"
    shutil.copytree(gpt2_ckpt, root)
    folder = load_checkpoint(root).path
    meta_file = folder / "textmill.json"
    meta = json.loads(meta_file.read_text())
    assert set(meta.pop("files")) == {"mp_rank_00/model_optim_rng.pt"}
    capsys.readouterr()
    for record in ({}, {"files": {}}, {"files": None}):
        meta_file.write_text(json.dumps({**meta, **record}))
        load_model(root)
        assert capsys.readouterr().err == (f"textmill: warning: {folder} holds no record of its files' sizes and "
                                           "sha256 sums (textmill.json: 'files'); loaded unverified\n"), record
    meta["files"] = {"../../elsewhere": {"bytes": 1, "sha256": "0"}}
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(TextmillError, match="'files' record is not a list of sizes"):
        load_model(root)


def test_each_torchrun_rank_hashes_its_share_of_a_checkpoint(dist_ckpt, monkeypatch):
    """Sizes are checked by every process, sha256 sums by one process each: damage in a file is found by the
    rank whose share it is (and torchrun ends the others)."""
    folder = load_checkpoint(dist_ckpt).path
    names = sorted(json.loads((folder / "textmill.json").read_text())["files"])
    assert len(names) >= 2
    flip_bytes(folder / names[1])
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    load_checkpoint(dist_ckpt)  # rank 0 hashes names[0::2]
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(TextmillError, match=re.escape(names[1])):
        load_checkpoint(dist_ckpt)
