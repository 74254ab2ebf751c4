"""Checkpoints in Megatron's directory layout (docs/REFERENCE.md section 7.1), in either of Megatron's formats:

    <save>/latest_checkpointed_iteration.txt           "<iteration>" or "release"
    --ckpt-format torch (one process):
    <save>/iter_0000100/mp_rank_00/model_optim_rng.pt
    --ckpt-format torch_dist (several processes; torch.distributed.checkpoint):
    <save>/iter_0000100/.metadata, __<rank>_0.distcp   each rank writes its own shards, no gather
    <save>/iter_0000100/textmill.json                  everything that is not a tensor
    <save>/release/...                                  weights only (imported models); training starts at 0

Tensors are keyed by parameter name (model), parameter name and state (optimizer), and rank (random
state), never by layout, so a checkpoint loads into any other parallel layout: torch.distributed.checkpoint
reads each rank's part of each tensor from whichever files hold it.

A checkpoint directory is written under a temporary name and renamed into place, and the tracker file is
rewritten after that, so a killed save never leaves a directory that `--load` would pick up. `textmill.json`
records the size and sha256 of every other file in the folder; a checkpoint whose files differ from that
record is refused when loaded (one line naming the file), so a damaged model is never trained on and saved
over a good one.

Loading never runs code from the checkpoint folder. The single file is read with
`torch.load(weights_only=True)`; the distributed format's `.metadata` through trainer/dcp_metadata.py.
Everything that is not a tensor is JSON (`textmill.json`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from textmill.errors import TextmillError
from textmill.trainer.dcp_metadata import load_dcp, read_dcp_metadata
from textmill.io.files import atomic_path, empty_folder_beside, replace_folder, sha256_of
from textmill.io.numbers import whole_number

if TYPE_CHECKING:
    import torch

TRACKER = "latest_checkpointed_iteration.txt"
STATE_FILE = Path("mp_rank_00") / "model_optim_rng.pt"
META_FILE = "textmill.json"
CHECKPOINT_VERSION = 3.0


def checkpoint_dir(root: Path, iteration: int | str) -> Path:
    return root / ("release" if iteration == "release" else f"iter_{iteration:07d}")


def is_writer() -> bool:
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


def save_checkpoint(root: Path, iteration: int | Literal["release"], meta: dict, tensors: dict,
                    fmt: Literal["torch", "torch_dist"] = "torch") -> Path:
    """Write `tensors` (nested dicts of tensors) and `meta` (JSON values) as the checkpoint of `iteration`
    (an int, or "release") and point the tracker at it. With fmt "torch_dist" every rank must call this."""
    import torch

    final, tmp, meta = prepare_checkpoint(root, iteration, meta)
    if fmt == "torch":
        if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            raise TextmillError("--ckpt-format torch writes one file from one process; use torch_dist with several")
        (tmp / STATE_FILE).parent.mkdir(parents=True)
        torch.save({**meta, **tensors}, tmp / STATE_FILE)
    else:
        import torch.distributed.checkpoint as dcp

        dcp.save(tensors, checkpoint_id=tmp)
    publish_checkpoint(root, iteration, meta, tmp, final)
    return final


@dataclass
class PendingCheckpoint:
    """A torch_dist checkpoint being written in the background (start_checkpoint): `wait` lets it finish
    on every rank and then names it in the tracker."""
    root: Path
    iteration: int
    meta: dict
    tmp: Path
    final: Path
    writing: object  # the Future of torch.distributed.checkpoint.async_save

    def wait(self) -> Path:
        self.writing.result()
        publish_checkpoint(self.root, self.iteration, self.meta, self.tmp, self.final)
        return self.final


def start_checkpoint(root: Path, iteration: int, meta: dict, tensors: dict, group=None) -> PendingCheckpoint:
    """save_checkpoint's torch_dist, in the background: the tensors are copied to host memory before this
    returns (training may change them after), then written by a thread that coordinates the ranks over
    `group`, a process group of its own, so its collectives never interleave with training's."""
    import torch.distributed.checkpoint as dcp

    final, tmp, meta = prepare_checkpoint(root, iteration, meta)
    writing = dcp.async_save(tensors, checkpoint_id=tmp, process_group=group)
    return PendingCheckpoint(root, iteration, meta, tmp, final, writing)


def prepare_checkpoint(root: Path, iteration: int | str, meta: dict) -> tuple[Path, Path, dict]:
    """The checkpoint's folder, the hidden folder it is written in first, and its metadata."""
    final = checkpoint_dir(root, iteration)
    tmp = final.with_name(f".{final.name}.tmp")
    meta = {**meta, "checkpoint_version": CHECKPOINT_VERSION, "iteration": 0 if iteration == "release" else iteration}
    if is_writer():
        empty_folder_beside(final)
    barrier()
    return final, tmp, meta


def publish_checkpoint(root: Path, iteration: int | str, meta: dict, tmp: Path, final: Path) -> None:
    """Once every rank has written its part: the metadata, the folder under its name, the tracker."""
    barrier()
    if is_writer():
        meta = {**meta, "files": written_files(tmp)}
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        replace_folder(tmp, final)
        with atomic_path(root / TRACKER) as t:
            t.write_text(f"{iteration}\n")
    barrier()


def written_files(folder: Path) -> dict[str, dict]:
    """Size and sha256 of each file of a checkpoint folder, by its path inside the folder (the metadata file
    that records them aside)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != META_FILE)
    return {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_of(p)}
            for p in files}


def verify_files(folder: Path, recorded) -> None:
    """Refuse a checkpoint folder whose files are not those `recorded` when it was written (written_files):
    every size is compared, and each process of a torchrun world hashes its share of the files, so a
    checkpoint is read once more in all, not once per rank. A checkpoint without the record (written before
    textmill kept one, or its record lost: `recorded` None or empty) is taken as it is, with one warning: the
    record is a checksum against damage, not a signature, and cannot tell a changed file without it."""
    from textmill.trainer.parallel.dims import world_from_env

    world, rank, _ = world_from_env()
    if not recorded:
        if rank == 0:
            print(f"textmill: warning: {folder} holds no record of its files' sizes and sha256 sums ({META_FILE}: "
                  "'files'); loaded unverified", file=sys.stderr)
        return
    record = folder / META_FILE
    if not isinstance(recorded, dict) or not all(
            isinstance(name, str) and isinstance(entry, dict) and ".." not in Path(name).parts
            and not Path(name).is_absolute() and isinstance(entry.get("bytes"), int) and isinstance(entry.get("sha256"), str)
            for name, entry in recorded.items()):
        raise TextmillError(f"{record}: its 'files' record is not a list of sizes and sha256 sums")
    advice = "; load an earlier checkpoint (point latest_checkpointed_iteration.txt at it) or another copy"
    names = sorted(recorded)
    for name in names:
        file, entry = folder / name, recorded[name]
        if not file.is_file():
            raise TextmillError(f"{file}: missing from the checkpoint ({record} lists it){advice}")
        size = file.stat().st_size
        if size != entry["bytes"]:
            raise TextmillError(f"{file}: damaged, {size} bytes where {entry['bytes']} were written{advice}")
    for name in names[rank::world]:
        if sha256_of(folder / name) != recorded[name]["sha256"]:
            raise TextmillError(f"{folder / name}: damaged, its sha256 differs from the one recorded when it "
                                f"was written{advice}")


def read_tracker(root: Path) -> int | str | None:
    """The iteration the tracker names, "release", or None when `root` holds no checkpoint."""
    tracker = root / TRACKER
    if not tracker.exists():
        return None
    text = tracker.read_text().strip()
    if text == "release":
        return text
    iteration = whole_number(text)
    if not iteration:
        raise TextmillError(f"{tracker}: expected an iteration number or 'release', found {text[:40]!r}")
    return iteration


@dataclass
class Checkpoint:
    path: Path  # the iteration directory
    meta: dict  # model_config, iteration, args, ... (JSON values)
    format: str  # "torch" or "torch_dist"
    full: dict | None = None  # the single file's tensors (torch format)

    def model_config(self):
        """The model the checkpoint holds, from its JSON metadata (checked like any config read from a file)."""
        from textmill.trainer.gpt_config import GPTConfig

        try:
            return GPTConfig.from_dict(self.meta["model_config"])
        except TypeError as exc:
            raise TextmillError(f"{self.path}: its model_config is not one textmill knows ({exc})") from None

    @property
    def release(self) -> bool:
        return self.path.name == "release"

    def stored_keys(self) -> set[str]:
        """Flattened names of the tensors stored ("model.wte.weight", "rng.rank0.torch", ...)."""
        if self.format == "torch":
            return set(flatten(self.full))
        return set(read_dcp_metadata(self.path).state_dict_metadata)

    def load_into(self, template: dict) -> dict:
        """Fill `template` (nested dicts of tensors or DTensors, shaped for the current layout) with the
        stored values; each rank reads only its part."""
        if self.format == "torch":
            try:
                return pick(self.full, template)
            except KeyError as exc:
                raise TextmillError(f"{self.path}: has no {exc.args[0]!r} for this model") from None
        return load_dcp(self.path, template)


def pick(stored: dict, template: dict) -> dict:
    """The entries of `stored` that `template` names, at every level (a pipeline stage wants only its layers)."""
    return {k: pick(stored[k], v) if isinstance(v, dict) else stored[k] for k, v in template.items()}


def flatten(tree: dict, prefix: str = "") -> dict:
    import torch

    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        elif isinstance(v, torch.Tensor):
            out[f"{prefix}{k}"] = v
    return out


def load_checkpoint(root: Path) -> Checkpoint | None:
    """The newest checkpoint under `root` (None if there is none). A tracker naming a missing or
    unreadable checkpoint is an error, never a silent fresh start."""
    iteration = read_tracker(root)
    if iteration is None:
        return None
    path = checkpoint_dir(root, iteration)
    if (path / ".metadata").exists():
        read_dcp_metadata(path)  # refused here, with its own message, before anything else reads the folder
        meta = read_meta(path)
        if meta is None:
            raise TextmillError(f"{path / META_FILE}: not found (every textmill checkpoint has one)")
        verify_files(path, meta.get("files"))
        ckpt = Checkpoint(path, meta, "torch_dist")
    else:
        import torch

        file = path / STATE_FILE
        if not file.exists():
            raise TextmillError(f"{root / TRACKER} names {iteration}, but {path} holds no checkpoint (partial or moved)")
        verify_files(path, (read_meta(path) or {}).get("files"))
        try:
            state = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises several types for truncated or foreign files
            reason = str(exc).splitlines()[0][:200]
            raise TextmillError(f"{file}: not a readable checkpoint ({type(exc).__name__}: {reason})") from None
        tensors = {k: v for k, v in state.items() if isinstance(v, dict) and k in ("model", "optimizer_state", "rng")}
        ckpt = Checkpoint(path, {k: v for k, v in state.items() if k not in tensors}, "torch", tensors)
    for key in ("model_config", "iteration"):
        if key not in ckpt.meta:
            raise TextmillError(f"{path}: not a textmill checkpoint (no {key!r})")
    return ckpt


def read_meta(path: Path) -> dict | None:
    """A checkpoint folder's textmill.json (None where there is none)."""
    file = path / META_FILE
    if not file.exists():
        return None
    try:
        meta = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise TextmillError(f"{file}: not readable ({exc})") from None
    if not isinstance(meta, dict):
        raise TextmillError(f"{file}: not a checkpoint's metadata (a JSON {type(meta).__name__})")
    return meta


def newest_meta(root: Path) -> dict:
    """What the newest checkpoint under `root` records of itself (its textmill.json; {} for one without), read
    without torch, for what a command checks before it loads a model. One error line where there is none."""
    iteration = read_tracker(root)
    if iteration is None:
        raise no_checkpoint(root)
    return read_meta(checkpoint_dir(root, iteration)) or {}


def no_checkpoint(root: Path) -> TextmillError:
    return TextmillError(f"{root}: no checkpoint here ({TRACKER} is missing)")


def load_model(root: Path, device: str | torch.device = "cpu"):
    """The model of the newest checkpoint under `root` (any format and layout), in eval mode, and the
    checkpoint."""
    from textmill.trainer.model import GPT

    ckpt = load_checkpoint(root)
    if ckpt is None:
        raise no_checkpoint(root)
    model = GPT.for_loading(ckpt.model_config())
    model.load_state_dict(ckpt.load_into({"model": model.state_dict()})["model"])
    return model.to(device).eval(), ckpt


def checkpoint_tokenizer_files(root: Path, vocab_file=None, merge_file=None) -> dict:
    """open_tokenizer's arguments for a checkpoint's tokenizer (checkpoint_tokenizer), found without reading it;
    one error line when there is none."""
    from textmill.tokenizers.files import tokenizer_files_in

    kept = root / "tokenizer"
    files = {"vocab_file": vocab_file, "merge_file": merge_file} if vocab_file and merge_file else tokenizer_files_in(kept)
    if files is None:
        raise TextmillError(f"{kept}/ holds no vocab.json + merges.txt (nor tokenizer.json); give --vocab-file and "
                            "--merge-file")
    return files


def checkpoint_tokenizer(root: Path, meta: dict, vocab_file=None, merge_file=None):
    """The tokenizer a checkpoint was trained with: the given GPT-2 files, or the copies the trainer keeps in
    `<root>/tokenizer/` (GPT-2's vocab.json + merges.txt, or a Hugging Face folder's tokenizer.json). Its
    size must be the checkpoint's unpadded vocabulary size."""
    from textmill.tokenizers.files import open_tokenizer

    tokenizer = open_tokenizer(**checkpoint_tokenizer_files(root, vocab_file, merge_file))
    source = tokenizer.files[0]
    expected = meta.get("vocab_size")
    # A model's own tokenizer may hold fewer tokens than its embedding has rows (GPT-J and NeoX pad).
    if expected is not None and tokenizer.vocab_size > expected:
        raise TextmillError(f"{source} has {tokenizer.vocab_size} tokens, but the checkpoint was trained "
                            f"with a vocabulary of {expected}")
    return tokenizer


def checkpoint_model_config(config, vocab_size: int):
    """The GPTConfig of the newest checkpoint at --load (Megatron's --use-checkpoint-args), with this run's
    dropout, for a tokenizer of `vocab_size` tokens (the checkpoint's own: a model reads only the ids it
    was trained on), the model's vocabulary size (its rows that are tokens, which may be more), and the
    checkpoint (read once: the checkpointer takes it)."""
    from textmill.trainer.gpt_config import GPTConfig
    from textmill.trainer.train_config import check_vocabulary

    if config.load is None:
        raise TextmillError("--use-checkpoint-args needs --load (the checkpoint whose model to train)")
    ckpt = load_checkpoint(config.load)
    if ckpt is None:
        raise TextmillError(f"--use-checkpoint-args: no checkpoint in {config.load}")
    check_vocabulary(ckpt.meta, vocab_size, config.load)
    model = GPTConfig.from_dict({**ckpt.meta["model_config"], "hidden_dropout": config.hidden_dropout,
                                 "attention_dropout": config.attention_dropout})
    return model, ckpt.meta.get("vocab_size", vocab_size), ckpt
