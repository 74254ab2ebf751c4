"""Loading a checkpoint never runs code from its folder: sharded metadata pointing outside it is refused, and a
sharded checkpoint still loads."""

import io
import pickle

import pytest
import torch

from textmill.errors import TextmillError
from textmill.trainer.checkpoint import SafeMetadataUnpickler, load_checkpoint, load_model


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
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name
