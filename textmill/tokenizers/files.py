"""Which tokenizer some options or files name: GPT-2's vocab.json + merges.txt, or a Hugging Face tokenizer
folder (tokenizer.json). One place that tells the two apart, for the commands, the checkpoints and the
workflow."""

from __future__ import annotations

from pathlib import Path


def open_tokenizer(vocab_file: Path | None = None, merge_file: Path | None = None, tokenizer_model: Path | None = None,
                   endoftext: str = "text"):
    """The tokenizer of a Hugging Face folder, else of GPT-2's two files (`endoftext`: GPT2Tokenizer's), else None."""
    if tokenizer_model is not None:
        from textmill.tokenizers.hf import HFTokenizer

        return HFTokenizer(tokenizer_model)
    if vocab_file is not None:
        from textmill.tokenizers.gpt2 import GPT2Tokenizer

        return GPT2Tokenizer(vocab_file, merge_file, endoftext)
    return None


def tokenizer_files_in(folder: Path) -> dict | None:
    """open_tokenizer's arguments for the tokenizer whose files a folder holds (tokenizer.json, or vocab.json +
    merges.txt), or None; nothing is read."""
    from textmill.tokenizers.hf import is_hf_tokenizer_folder

    folder = Path(folder)
    if is_hf_tokenizer_folder(folder):
        return {"tokenizer_model": folder}
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        return {"vocab_file": folder / "vocab.json", "merge_file": folder / "merges.txt"}
    return None


def folder_files(tokenizer) -> dict[str, Path]:
    """A tokenizer's files by the names they take in a model or checkpoint folder: a Hugging Face
    tokenizer's own names, GPT-2's files as vocab.json and merges.txt."""
    from textmill.tokenizers.hf import HFTokenizer

    if isinstance(tokenizer, HFTokenizer):
        return {path.name: path for path in tokenizer.files}
    vocab_file, merge_file = tokenizer.files
    return {"vocab.json": vocab_file, "merges.txt": merge_file}


def tokenizer_settings(files: list[Path]) -> dict:
    """The settings (TokenizeConfig's and TrainConfig's field names) naming the tokenizer of these files:
    a Hugging Face folder's (tokenizer.json first), or GPT-2's vocab.json and merges.txt."""
    if files[0].name == "tokenizer.json":
        return {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": files[0].parent}
    return {"vocab_file": files[0], "merge_file": files[1]}
