"""What several commands share: help formatters, the tokenizer-file options, and the wall-time tag their
summaries end with."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from textmill.settings import ArgumentDefaults


class DocstringHelpFormatter(argparse.RawDescriptionHelpFormatter, ArgumentDefaults):
    """Defaults shown, and a module docstring used as the description keeps its line breaks."""


class Timer:
    """Wall time since the command started its work."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started


def add_tokenizer_files(p: argparse.ArgumentParser, when: str) -> None:
    """--vocab-file and --merge-file, GPT-2's two tokenizer files; `when` says what they do for this command."""
    p.add_argument("--vocab-file", type=Path, help=f"GPT-2 vocab.json, with --merge-file: {when}")
    p.add_argument("--merge-file", type=Path, help=f"GPT-2 merges.txt, with --vocab-file: {when}")


def check_checkpoint(load: Path, vocab_file: Path | None = None, merge_file: Path | None = None) -> None:
    """That `load` holds a checkpoint and its tokenizer's files, checked before torch is imported (seconds,
    minutes on a busy machine), so that a missing one is told at once; the command reads them after."""
    from textmill.trainer.checkpoint import checkpoint_tokenizer_files, newest_meta

    newest_meta(load)
    checkpoint_tokenizer_files(load, vocab_file, merge_file)
