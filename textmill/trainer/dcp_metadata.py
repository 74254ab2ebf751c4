"""torch.distributed.checkpoint folders read without running code from them.

DCP would read a folder's `.metadata` with plain `pickle.load`, and would `torch.load(weights_only=False)` any
entry the metadata declares as bytes; textmill reads `.metadata` itself through an unpickler that admits only
the classes DCP metadata is made of (`SafeMetadataUnpickler`), accepts only tensor entries stored in the folder's
own `__R_0.distcp` files, and hands that metadata to DCP (`VerifiedReader`). Used for textmill's own checkpoints
(trainer/checkpoint.py) and Megatron-LM's (interop/megatron_dist.py).
"""

from __future__ import annotations

import io
import pickle
import re
import warnings
from pathlib import Path

from textmill.errors import TextmillError

DCP_FILE = re.compile(r"^__\d+_\d+\.distcp$")


class SafeMetadataUnpickler(pickle.Unpickler):
    """Unpickles torch.distributed.checkpoint's `.metadata` admitting only the classes that file is made of
    (checked against what DCP writes); any other global, whatever it would do, is refused. BytesStorageMetadata
    is left out on purpose: DCP would torch.load such an entry with weights_only=False, and textmill stores
    tensors only. Megatron-LM's folders (`foreign=True`) have such entries (Transformer Engine's extra state,
    random states) and keep the save plans in the metadata: their classes are admitted there, and the caller
    reads only the tensor entries."""

    ALLOWED = {
        "torch.distributed.checkpoint.metadata": {"Metadata", "TensorStorageMetadata", "TensorProperties",
                                                  "ChunkStorageMetadata", "MetadataIndex", "StorageMeta",
                                                  "_MEM_FORMAT_ENCODING"},
        "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
        "torch.serialization": {"_get_layout"},  # a lookup of torch.strided and friends by name
        "torch": {"Size"},
        "pathlib": {"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},
    }
    FOREIGN = {  # dataclasses and an enum of plain values
        "torch.distributed.checkpoint.metadata": {"BytesStorageMetadata"},
        "torch.distributed.checkpoint.planner": {"SavePlan", "WriteItem", "WriteItemType", "TensorWriteData"},
    }

    def __init__(self, file, foreign: bool = False):
        super().__init__(file)
        self.foreign = foreign

    def find_class(self, module: str, name: str):
        if name in self.ALLOWED.get(module, ()) or (self.foreign and name in self.FOREIGN.get(module, ())):
            return super().find_class(module, name)
        import torch

        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"refused {module}.{name}: not a part of checkpoint metadata")


def read_dcp_metadata(folder: Path, foreign: bool = False):
    """The `.metadata` of a torch.distributed.checkpoint folder, read without running code from it and checked
    to point only at shard files of this folder (`foreign`: one Megatron-LM wrote, SafeMetadataUnpickler)."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata

    file = folder / ".metadata"
    advice = "" if foreign else "; use a checkpoint written by textmill"
    try:
        metadata = SafeMetadataUnpickler(io.BytesIO(file.read_bytes()), foreign).load()
    except Exception as exc:  # a refused global, a truncated or foreign file: all one answer
        raise TextmillError(f"{file}: refused, not checkpoint metadata textmill can trust ({exc}){advice}") from None
    bad = None
    if not isinstance(metadata, Metadata):
        bad = f"holds a {type(metadata).__name__}, not DCP metadata"
    elif any(not isinstance(i, _StorageInfo) or not DCP_FILE.match(str(i.relative_path)) or i.transform_descriptors
             for i in (metadata.storage_data or {}).values()):
        bad = "points at data outside its own __R_N.distcp files"
    if bad:
        raise TextmillError(f"{file}: refused, {bad}{advice}")
    return metadata


def verified_reader(folder: Path, foreign: bool = False):
    """A DCP storage reader for `folder` whose metadata is the one `read_dcp_metadata` checked."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class VerifiedReader(FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            metadata = read_dcp_metadata(folder, foreign)
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = getattr(self, "load_id", None)  # as FileSystemReader sets it
            return metadata

    return VerifiedReader(folder)


def load_dcp(folder: Path, template: dict, foreign: bool = False) -> dict:
    """Fill `template` from the torch.distributed.checkpoint folder `folder`, its metadata checked first
    (verified_reader); a failure is one error line."""
    import torch.distributed.checkpoint as dcp

    try:
        with warnings.catch_warnings():  # DCP warns when it reads in one plain process, which is intended
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(template, storage_reader=verified_reader(folder, foreign))
    except Exception as exc:  # DCP wraps per-rank failures in CheckpointException
        raise TextmillError(f"{folder}: cannot be read into this model ({type(exc).__name__}: "
                            f"{str(exc).strip().splitlines()[-1][:300]})") from None
    return template
