"""An imported model written as a textmill `release` checkpoint: its weights, its shape and its tokenizer's
files in SAVE/tokenizer/, which every command that loads a checkpoint finds there."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from textmill.errors import TextmillError
from textmill.trainer.checkpoint import save_checkpoint
from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.model import GPT


def checked_model(model_config: GPTConfig, state: dict, source: Path) -> GPT:
    """The model holding `state`: every name and shape checked against the config before anything is allocated
    (a config read from a file may declare a shape far larger than the tensors it came with), one error line
    if they differ."""
    layers = {name.split(".")[1] for name in state if name.startswith("blocks.")}
    if len(layers) != model_config.num_layers:  # checked first: a model of 10^9 layers cannot even be described
        raise TextmillError(f"{source}: declares {model_config.num_layers} layers, its tensors hold {len(layers)}")
    with torch.device("meta"):
        expected = {name: tuple(t.shape) for name, t in GPT(model_config).state_dict().items()}
    given = {name: tuple(t.shape) for name, t in state.items()}
    differences = ([f"{name} missing" for name in sorted(expected.keys() - given.keys())]
                   + [f"{name} not in the model" for name in sorted(given.keys() - expected.keys())]
                   + [f"{name} is {list(given[name])}, the model's {list(expected[name])}"
                      for name in sorted(expected.keys() & given.keys()) if given[name] != expected[name]])
    if differences:
        more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
        raise TextmillError(f"{source}: its weights do not fit the model it describes ({'; '.join(differences[:3])}{more})")
    model = GPT.for_loading(model_config)
    model.load_state_dict(state)
    return model


def save_release(save: Path, model: GPT, tokenizer, vocab: int, source: Path, **meta) -> None:
    """`model` as the release checkpoint of `save`, `vocab` of its rows real tokens, with the tokenizer's files."""
    from textmill.tokenizers.files import folder_files

    if tokenizer.vocab_size > vocab:  # fewer is fine (GPT-J and NeoX pad theirs); more cannot be embedded
        raise TextmillError(f"the tokenizer has {tokenizer.vocab_size} tokens, the model {vocab}")
    save = Path(save)
    (save / "tokenizer").mkdir(parents=True, exist_ok=True)
    for name, path in folder_files(tokenizer).items():
        shutil.copyfile(path, save / "tokenizer" / name)
    model_config = model.config
    meta = {"model_config": model_config.to_dict(), "vocab_size": vocab, "tokenizer_vocab_size": tokenizer.vocab_size,
            "seq_length": model_config.max_position_embeddings, "imported_from": str(source), **meta}
    save_checkpoint(save, "release", meta, {"model": {k: v.to(torch.float32) for k, v in model.state_dict().items()}})
