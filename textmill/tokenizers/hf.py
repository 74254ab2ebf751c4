"""A Hugging Face tokenizer from a local folder: Megatron's `--tokenizer-type HuggingFaceTokenizer
--tokenizer-model DIR`, for a model's own vocabulary (LLaMA's, NeoX's, ...).

Megatron's HuggingFaceTokenizer calls transformers' `AutoTokenizer(text).input_ids`; for a folder with a
`tokenizer.json` that is the fast tokenizer, which is the `tokenizers` library running that file with its
special tokens added (a LLaMA tokenizer's BOS before each document). The end-of-document token is the
tokenizer's `eos_token` (tokenizer_config.json, or special_tokens_map.json). Nothing is downloaded: the
folder must hold tokenizer.json, as `save_pretrained` writes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from textmill.errors import TextmillError

# The files of a tokenizer folder textmill reads and keeps with a checkpoint (those present).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def check_tokenizer_choice(tokenizer_type: str, tokenizer_model: Path | None, vocab_file: Path | None) -> None:
    """Megatron's --tokenizer-type with the files it takes: a Hugging Face folder, or GPT-2's two files."""
    if tokenizer_type == "HuggingFaceTokenizer":
        if tokenizer_model is None:
            raise TextmillError("--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model (a local Hugging Face "
                                "tokenizer folder)")
        if vocab_file is not None:
            raise TextmillError("--tokenizer-model and --vocab-file exclude each other (the folder holds the vocabulary)")
    elif tokenizer_model is not None:
        raise TextmillError("--tokenizer-model goes with --tokenizer-type HuggingFaceTokenizer")


def is_hf_tokenizer_folder(folder: Path) -> bool:
    return (Path(folder) / "tokenizer.json").is_file()


def folder_tokenizer_files(folder: Path) -> tuple[Path, ...]:
    """The files of TOKENIZER_FILES a tokenizer folder holds, tokenizer.json first; one error line if it has none."""
    if not is_hf_tokenizer_folder(folder):
        raise TextmillError(f"--tokenizer-model {folder}: no tokenizer.json there (a Hugging Face tokenizer "
                            "folder, as save_pretrained writes it; nothing is downloaded)")
    return tuple(Path(folder) / name for name in TOKENIZER_FILES if (Path(folder) / name).is_file())


class HFTokenizer:
    """The tokenizer of a local Hugging Face tokenizer folder, with GPT2Tokenizer's interface."""

    def __init__(self, folder: str | Path):
        from tokenizers import Tokenizer

        self.folder = Path(folder)
        self.files = folder_tokenizer_files(self.folder)
        try:
            self._tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        except Exception as exc:  # the Rust library's own error type
            raise TextmillError(f"{self.folder / 'tokenizer.json'}: not a tokenizer the tokenizers library reads "
                                f"({str(exc).splitlines()[0][:200]})") from None
        self.vocab_size = self._tokenizer.get_vocab_size(with_added_tokens=True)
        eos = self.special_token("eos_token")
        self.eod = self._tokenizer.token_to_id(eos) if eos else None
        if self.eod is None:
            raise TextmillError(f"{self.folder}: no end-of-document token (tokenizer_config.json names no eos_token "
                                "in the vocabulary)")
        bos = self.special_token("bos_token")
        self.bos = self._tokenizer.token_to_id(bos) if bos else None

    def special_token(self, name: str) -> str | None:
        """A special token's text from tokenizer_config.json, else special_tokens_map.json."""
        for file in ("tokenizer_config.json", "special_tokens_map.json"):
            path = self.folder / file
            try:
                value = json.loads(path.read_text(encoding="utf-8")).get(name) if path.is_file() else None
            except (OSError, ValueError) as exc:
                raise TextmillError(f"{path}: not a readable JSON object ({exc})") from None
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                return value
        return None

    def encode(self, text: str) -> list[int]:
        """Ids of `text` with the tokenizer's special tokens (a BOS where its template puts one), as
        transformers' `tokenizer(text).input_ids` gives them."""
        return self._tokenizer.encode(text).ids

    def encode_plain(self, text: str) -> list[int]:
        """Ids of text that continues a document: no special tokens added."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def encode_array(self, text: str) -> np.ndarray:
        return np.asarray(self.encode(text), dtype=np.uint32)

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=False)

    def decode_bytes(self, ids: list[int]) -> bytes:
        return self.decode(ids).encode("utf-8")
