"""Dropout's random streams per rank, as Megatron-LM's model-parallel RNG tracker keeps them.

Every rank builds the whole model from --seed, so every layout starts from the same weights. Dropout then
draws from two streams:
- the default stream: the same on every tensor-parallel rank, where each holds the whole activation
  (hidden dropout without sequence parallelism), so their masks agree; each pipeline stage reseeds it
  (seed + 100 x stage, Megatron's), so stages holding different layers draw differently;
- the tensor-parallel stream, seeded seed + 100 x stage + 2718 + tensor-parallel rank (Megatron's offset):
  where each rank holds a different part, its attention heads and, under sequence parallelism, its slice
  of the sequence.
Data-parallel ranks share both, as in Megatron (their data differ). A recomputed region (activation
checkpointing) draws the masks it drew in the forward pass from either stream: torch's checkpoint restores
the default stream, and `recomputed` gives it the tensor-parallel stream's state of that moment too.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

TENSOR_PARALLEL_OFFSET = 2718  # Megatron's model-parallel seed offset
STAGE_STRIDE = 100  # Megatron's seed step per pipeline stage


def _state(device: torch.device) -> torch.Tensor:
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _set_state(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


class DropoutStreams:
    """The tensor-parallel stream of this rank, entered with `tensor_parallel()`."""

    def __init__(self, device: torch.device, seed: int, tp_rank: int, pp_rank: int, pipeline: bool):
        self.device = device
        if pipeline:  # one process or one stage keeps the stream its model was built from
            torch.manual_seed(seed + STAGE_STRIDE * pp_rank)
        generator = torch.Generator(device=device)
        generator.manual_seed(seed + STAGE_STRIDE * pp_rank + TENSOR_PARALLEL_OFFSET + tp_rank)
        self.state = generator.get_state()

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the streams: the tensor-parallel stream's state (the default stream is the
        trainer's to keep)."""
        return {"tensor_parallel": self.state}

    def load_state_dict(self, state: dict) -> None:
        self.state = state["tensor_parallel"]

    @contextlib.contextmanager
    def tensor_parallel(self) -> Iterator[None]:
        """Draw from the tensor-parallel stream inside the block; the default stream is left as it was."""
        outside = _state(self.device)
        _set_state(self.device, self.state)
        try:
            yield
        finally:
            self.state = _state(self.device)
            _set_state(self.device, outside)

    def recomputed(self):
        """torch.utils.checkpoint's context_fn: nothing in the forward pass; the recomputation draws from
        the tensor-parallel stream as it stood when the forward pass reached the region."""
        stashed = self.state
        return contextlib.nullcontext(), _Replay(self, stashed)


class _Replay:
    """Inside a recomputation: the tensor-parallel stream's state is the stashed one, and afterwards the
    live one again."""

    def __init__(self, streams: DropoutStreams, stashed: torch.Tensor):
        self.streams, self.stashed, self.live = streams, stashed, None

    def __enter__(self):
        self.live, self.streams.state = self.streams.state, self.stashed

    def __exit__(self, *exc):
        self.streams.state = self.live


def use_dropout_streams(model, streams: DropoutStreams, sequence_parallel: bool) -> None:
    """Point a tensor-parallel model's dropout at this rank's streams: attention always (each rank holds
    its own heads), hidden and embedding dropout under sequence parallelism (each rank its own slice)."""
    for block in model.blocks.values():
        block.attn.dropout_stream = streams.tensor_parallel
        if sequence_parallel:
            block.dropout_stream = streams.tensor_parallel
    if sequence_parallel:
        model.dropout_stream = streams.tensor_parallel
    model.recompute_context = streams.recomputed
