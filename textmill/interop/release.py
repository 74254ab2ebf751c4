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
    """The model holding `state`: every name and shape checked against the config, one error line if not."""
    model = GPT.for_loading(model_config)
    try:
        model.load_state_dict(state)
    except (KeyError, RuntimeError) as exc:
        raise TextmillError(f"{source}: its weights do not fit the model it describes ({type(exc).__name__}: "
                            f"{str(exc)[:300]})") from None
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
