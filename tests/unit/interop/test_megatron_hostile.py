"""`import megatron` given hostile or damaged checkpoints: each is one error line, before anything is built from
what the checkpoint declares (a shape the tensors do not have would allocate it) and without a traceback. The
adversarial pass's cases (issue 47): a declared shape of 10^9 layers, a .metadata declaring a huge or negative
size, a .distcp cut short, a tracker of odd digits, a version that is not a number, args without num_layers,
an embedding that is not a tensor, a tensor-parallel shard missing a layer's tensor."""

import re

import pytest
import torch

from support.files import TEST_DATA
from support.megatron_files import write_megatron
from textmill.errors import TextmillError
from textmill.interop.megatron import import_megatron

transformers = pytest.importorskip("transformers")
VOCAB, MERGES = TEST_DATA / "gpt2-vocab.json", TEST_DATA / "gpt2-merges.txt"


def small_gpt2():
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64)).eval()


def rewrite(file, change) -> None:
    state = torch.load(file, weights_only=False)
    change(state)
    torch.save(state, file)


def set_args(**values):
    def change(state):
        for name, value in values.items():
            if value is None:
                delattr(state["args"], name)
            else:
                setattr(state["args"], name, value)
    return change


def set_words(value):
    def change(state):
        state["model"]["language_model"]["embedding"]["word_embeddings"]["weight"] = value
    return change


def drop_tensor(state):
    del state["model"]["language_model"]["encoder"]["layers.1.mlp.dense_h_to_4h.weight"]


TORCH_CASES = {  # name: (the rank-0 or rank-1 file's change, a part of the one error line)
    "a billion layers declared": (0, set_args(num_layers=10**9), "declares 1000000000 layers, its tensors hold 2"),
    "a width the tensors do not have": (0, set_args(hidden_size=4096), "blocks.0.attn.proj.bias is [32], the model's [4096]"),
    "checkpoint_version 'three'": (0, lambda s: s.update(checkpoint_version="three"),
                                   "checkpoint_version 'three' is not a number"),
    "args without num_layers": (0, set_args(num_layers=None), "its args have no num_layers"),
    "a word embedding that is a string": (0, set_words("a string"), "embedding.word_embeddings.weight is a str, not a tensor"),
    "a shard missing a layer's tensor": (1, drop_tensor,
                                         "mp_rank_01/model_optim_rng.pt: lacks layers.1.mlp.dense_h_to_4h.weight"),
}


@pytest.mark.parametrize("case", sorted(TORCH_CASES))
def test_a_hostile_torch_checkpoint_is_one_error_line(case, tmp_path):
    rank, change, message = TORCH_CASES[case]
    folder = write_megatron(tmp_path / "megatron", small_gpt2(), 3.0, tp=2)
    rewrite(folder / "iter_0000010" / f"mp_rank_0{rank}" / "model_optim_rng.pt", change)
    with pytest.raises(TextmillError, match=re.escape(message)):
        import_megatron(folder, tmp_path / "ckpt", VOCAB, MERGES)
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.parametrize("said", ["²", "9" * 5000, "-3", ""])
def test_a_tracker_that_is_not_an_iteration_is_one_error_line(said, tmp_path):
    folder = write_megatron(tmp_path / "megatron", small_gpt2(), 3.0)
    (folder / "latest_checkpointed_iteration.txt").write_text(said)
    with pytest.raises(TextmillError, match="neither 'release' nor an iteration"):
        import_megatron(folder, tmp_path / "ckpt", VOCAB, MERGES)
