"""The tokenize stage's settings: the one definition from which `textmill tokenize`'s and `textmill
train-tokenizer`'s options and the run's [tokenize] table are generated (textmill.settings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from textmill.errors import TextmillError
from textmill.settings import SEED_MAX, Settings, setting
from textmill.tokenizers.hf import check_tokenizer_choice


@dataclass(frozen=True)
class TokenizeConfig(Settings):
    vocab_file: Path | None = setting(None, "GPT-2 vocab.json to encode with (with merge_file); none: train a "
                                      "byte-level BPE on the documents")
    merge_file: Path | None = setting(None, "GPT-2 merges.txt (with vocab_file)")
    vocab_size: int = setting(50257, "size of a trained BPE: 256 bytes + merges + <|endoftext|> (when no vocab_file)",
                              least=257)
    min_frequency: int = setting(2, "a pair seen fewer times is never merged when a BPE is trained", least=1)
    bpe_sample_documents: int = setting(200_000, "a BPE is trained on at most about this many documents: a seeded "
                                        "sample of the corpus when it has more", least=1)
    bpe_sample_seed: int = setting(0, "seed of that sample", least=0, most=SEED_MAX)
    json_keys: tuple[str, ...] = setting(("text",), "fields to tokenize; one dataset per field", nargs="+")
    append_eod: bool = setting(True, "end every non-empty document with <|endoftext|> (Megatron's preprocess_data.py "
                               "does so only with --append-eod)")
    workers: int = setting(2, "encoding threads (the encoder runs outside the GIL; does not change the output)",
                           least=1, keyed=False)
    tokenizer_type: Literal["GPT2BPETokenizer", "HuggingFaceTokenizer"] = setting(
        "GPT2BPETokenizer", "Megatron's name of the tokenizer: GPT2BPETokenizer (vocab_file and merge_file, or a BPE "
        "trained on the documents) or HuggingFaceTokenizer (a model's own, from the local folder tokenizer_model)")
    endoftext: Literal["text", "special"] = setting(
        "text", "with GPT2BPETokenizer, the text <|endoftext|> inside a document: text (encoded as ordinary text, "
        "as Megatron-LM's legacy GPT-2 tokenizer does, e.g. at commit 992da75) or special (the end-of-document id, "
        "as Megatron-LM today does through transformers, e.g. at commit d98e8a64dd; HuggingFaceTokenizer always "
        "does so)", added=True)
    tokenizer_model: Path | None = setting(None, "with tokenizer_type HuggingFaceTokenizer: a local Hugging Face "
                                           "tokenizer folder (tokenizer.json; its tokenizer_config.json names the "
                                           "eos_token that ends documents), e.g. the one beside an imported model")

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.vocab_file is None) != (self.merge_file is None):
            raise TextmillError("vocab_file and merge_file go together")
        check_tokenizer_choice(self.tokenizer_type, self.tokenizer_model, self.vocab_file)

    def given_tokenizer(self):
        """The tokenizer these settings name (GPT-2 files, or a Hugging Face folder), or None: train one."""
        from textmill.tokenizers.files import open_tokenizer

        return open_tokenizer(self.vocab_file, self.merge_file, self.tokenizer_model, self.endoftext)

    def given_files(self) -> tuple[Path, ...]:
        """The files of the tokenizer these settings name, without loading it (empty: none named)."""
        from textmill.tokenizers.hf import folder_tokenizer_files

        if self.tokenizer_model is not None:
            return folder_tokenizer_files(self.tokenizer_model)
        return (self.vocab_file, self.merge_file) if self.vocab_file is not None else ()
