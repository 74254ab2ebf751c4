"""Loading a checkpoint never runs code from the checkpoint folder (docs/RELIABILITY.md, checkpoints).

torch.distributed.checkpoint reads `.metadata` with plain pickle and would torch.load(weights_only=False)
any entry the metadata declares as bytes. Each command that loads a checkpoint is given a real sharded
checkpoint whose `.metadata` was replaced, and must refuse it in one line, exit 2, and leave no marker."""

import io
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from support.cli import run_cli
from support.training import parallel_config
from textmill.errors import TextmillError
from textmill.trainer.checkpoint import load_checkpoint, load_model, written_files
from textmill.trainer.dcp_metadata import SafeMetadataUnpickler


class RunsCode:
    """Unpickling this object creates the marker file, as a hostile `.metadata` would run anything."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def plant_code(root, marker):
    folder = load_checkpoint(root).path
    (folder / ".metadata").write_bytes(pickle.dumps(RunsCode(marker)))
    return folder


def plant_bytes_entry(root, marker):
    """Metadata made only of DCP's own classes that declares one weight as a bytes entry, whose bytes in a
    shard file are a pickle that runs code: DCP itself would torch.load it with weights_only=False."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

    folder = load_checkpoint(root).path
    metadata = SafeMetadataUnpickler(io.BytesIO((folder / ".metadata").read_bytes())).load()
    payload = io.BytesIO()
    torch.save(RunsCode(marker), payload)
    (folder / "__9_0.distcp").write_bytes(payload.getvalue())
    name = "model.wte.weight"
    metadata.state_dict_metadata[name] = BytesStorageMetadata()
    metadata.storage_data[MetadataIndex(name)] = _StorageInfo("__9_0.distcp", 0, len(payload.getvalue()))
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    return folder


def commands(root, corpus, tmp_path):
    load = str(root)
    return {
        "evaluate": ["evaluate", "lambada", "--load", load, "--valid-data", str(tmp_path / "lambada.jsonl")],
        "export": ["export", "hf", "--load", load, "--output", str(tmp_path / "hf")],
        "convert": ["checkpoint", "convert", "--load", load, "--save", str(tmp_path / "converted")],
        "serve": ["serve", "--load", load, "--port", "0"],
        "generate": ["generate", "--load", load, "--prompt", "hello", "--tokens-to-generate", "2"],
        "train": ["train", *parallel_config(corpus, train_iters=2, load=Path(load), save=tmp_path / "t").to_argv()],
    }


@pytest.mark.parametrize("command", ["evaluate", "export", "convert", "serve", "generate", "train"])
def test_every_loading_command_refuses_metadata_that_runs_code(command, dist_ckpt, corpus, tmp_path):
    marker = tmp_path / "marker"
    folder = plant_code(dist_ckpt, marker)
    (tmp_path / "lambada.jsonl").write_text('{"text": "one two three four"}\n')
    r = run_cli(*commands(dist_ckpt, corpus, tmp_path)[command])
    assert not marker.exists()
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"textmill: error: {folder / '.metadata'}: refused"), lines
    assert "builtins.exec" in lines[0]


def test_metadata_declaring_a_bytes_entry_is_refused(dist_ckpt, tmp_path):
    marker = tmp_path / "marker"
    folder = plant_bytes_entry(dist_ckpt, marker)
    with pytest.raises(TextmillError, match="refused torch.distributed.checkpoint.metadata.BytesStorageMetadata"):
        load_model(dist_ckpt)
    r = run_cli("export", "hf", "--load", str(dist_ckpt), "--output", str(tmp_path / "hf"))
    assert r.returncode == 2 and not marker.exists()
    assert r.stderr.strip().splitlines() == [
        f"textmill: error: {folder / '.metadata'}: refused, not checkpoint metadata textmill can trust (refused "
        "torch.distributed.checkpoint.metadata.BytesStorageMetadata: not a part of checkpoint metadata); use a "
        "checkpoint written by textmill"]


def test_the_bytes_entry_would_run_code_through_dcp_itself(dist_ckpt, tmp_path):
    """The attack above is real: DCP's own reader, given that folder, runs the planted code."""
    marker = tmp_path / "marker"
    folder = plant_bytes_entry(dist_ckpt, marker)
    script = ("import sys, torch, torch.distributed.checkpoint as dcp\n"
              "sd = {'model': {'wte': {'weight': torch.zeros(1)}}}\n"
              "try:\n    dcp.load(sd, checkpoint_id=sys.argv[1])\nexcept Exception:\n    pass\n")
    subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, timeout=120)
    assert marker.exists()


def test_a_single_file_checkpoint_or_hugging_face_bin_that_runs_code_is_refused(gpt2_ckpt, tmp_path):
    marker = tmp_path / "marker"
    ckpt = tmp_path / "single"
    shutil.copytree(gpt2_ckpt, ckpt)
    folder = load_checkpoint(ckpt).path
    state = folder / "mp_rank_00" / "model_optim_rng.pt"
    torch.save({"model": RunsCode(marker)}, state)
    meta = json.loads((folder / "textmill.json").read_text())  # the record made to fit, as an attacker would
    (folder / "textmill.json").write_text(json.dumps({**meta, "files": written_files(folder)}))
    r = run_cli("export", "hf", "--load", str(ckpt), "--output", str(tmp_path / "hf"))
    assert r.returncode == 2 and not marker.exists()
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"textmill: error: {state}: not a readable checkpoint (UnpicklingError")

    folder = tmp_path / "hf-bin"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "gpt2", "vocab_size": 512, "n_layer": 2, "n_embd": 64, '
                                        '"n_head": 4, "n_positions": 256}')
    torch.save({"transformer.wte.weight": RunsCode(marker)}, folder / "pytorch_model.bin")
    r = run_cli("import", "hf", str(folder), "--save", str(tmp_path / "imported"))
    assert r.returncode == 2 and not marker.exists(), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
