"""GPT-2 byte-level BPE from `vocab.json` + `merges.txt` (Megatron's --vocab-file/--merge-file).

Two encoders that must give the same ids:
- `ReferenceBPE`: the GPT-2 algorithm written out plainly (byte-to-unicode map, the GPT-2
  pre-tokenisation regex, greedy lowest-rank pair merges), the definition we test against;
- `GPT2Tokenizer`: the same vocabulary run by tiktoken (fast, releases the GIL), its ranks built from
  the merges the way OpenAI's files define them and checked against the vocabulary ids.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import regex

from textmill.errors import TextmillError

EOD_TOKEN = "<|endoftext|>"
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@functools.lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters: printable Latin-1 bytes map to
    themselves, the other 68 to chr(256 + n) in byte order (so space is 'Ġ' and newline 'Ċ'). The dict
    iterates in GPT-2's id order of the single bytes: the printable ones first, then the other 68."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    other = [b for b in range(256) if b not in keep]
    return {**{b: chr(b) for b in keep}, **{b: chr(256 + n) for n, b in enumerate(other)}}


def load_vocab_merges(vocab_file: str | Path, merge_file: str | Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    try:
        vocab = json.loads(Path(vocab_file).read_text(encoding="utf-8"))
        lines = Path(merge_file).read_text(encoding="utf-8").split("\n")
    except OSError as exc:
        raise TextmillError(f"cannot read tokenizer file {exc.filename}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise TextmillError(f"{vocab_file}: not a JSON vocabulary ({exc})") from None
    if lines and lines[0].startswith("#version"):
        lines = lines[1:]
    merges = []
    for n, line in enumerate(lines, 2):
        if not line.strip():
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise TextmillError(f"{merge_file}:{n}: a merge line must be two symbols separated by one space")
        merges.append((parts[0], parts[1]))
    if EOD_TOKEN not in vocab:
        raise TextmillError(f"{vocab_file}: no {EOD_TOKEN} token")
    return vocab, merges


class ReferenceBPE:
    """The GPT-2 encoding algorithm as OpenAI's encoder.py and Megatron-LM's legacy
    gpt2_tokenization.py run it, in plain Python (slow; the definition of correct ids)."""

    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]]):
        self.encoder = vocab
        self.bpe_ranks = {pair: i for i, pair in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.pattern = regex.compile(GPT2_PATTERN)
        self.cache: dict[str, tuple[str, ...]] = {}

    def bpe(self, token: str) -> tuple[str, ...]:
        """Merge the lowest-ranked adjacent pair, every occurrence left to right, until none is known."""
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:], strict=False))
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            merged, i = [], 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    merged.extend(word[i:])
                    break
                merged.extend(word[i:j])
                i = j
                if i < len(word) - 1 and word[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(first)
                    i += 1
            word = tuple(merged)
        self.cache[token] = word
        return word

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in self.pattern.findall(text):
            word = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(word))
        return ids


class GPT2Tokenizer:
    """GPT-2 BPE on tiktoken, built from vocab.json + merges.txt (no download, works offline)."""

    def __init__(self, vocab_file: str | Path, merge_file: str | Path, endoftext: str = "text"):
        """`endoftext`: how the text '<|endoftext|>' inside a document is encoded: "text" (ordinary text, as
        Megatron-LM's own GPT-2 encoder did, up to its legacy tokenizer) or "special" (the end-of-document id,
        as Megatron-LM today, whose GPT2BPETokenizer goes through transformers)."""
        import tiktoken

        vocab, merges = load_vocab_merges(vocab_file, merge_file)
        byte_decoder = {c: b for b, c in bytes_to_unicode().items()}

        def to_bytes(symbol: str) -> bytes:
            try:
                return bytes(byte_decoder[c] for c in symbol)
            except KeyError:
                raise TextmillError(f"{merge_file}: symbol {symbol!r} is not byte-level BPE") from None

        # Ranks as OpenAI defines them: the 256 bytes in map order, then one rank per merge.
        ranks = {bytes([b]): i for i, b in enumerate(bytes_to_unicode())}
        for a, b in merges:
            ranks[to_bytes(a) + to_bytes(b)] = len(ranks)
        ids = {to_bytes(tok): i for tok, i in vocab.items() if tok != EOD_TOKEN}
        if ranks != ids:
            raise TextmillError(
                f"{vocab_file} and {merge_file} do not fit together: vocabulary ids must be the byte ranks "
                "followed by one id per merge, in merge order (as GPT-2's files are)"
            )
        self.files = (Path(vocab_file), Path(merge_file))
        self.endoftext = endoftext
        self._allowed_special = {EOD_TOKEN} if endoftext == "special" else set()
        self.vocab_size = len(vocab)
        self.eod = vocab[EOD_TOKEN]
        self._encoding = tiktoken.Encoding(
            name=f"textmill-bpe-{self.vocab_size}",
            pat_str=GPT2_PATTERN,
            mergeable_ranks=ranks,
            special_tokens={EOD_TOKEN: self.eod},
        )

    def encode(self, text: str) -> list[int]:
        """Ids of `text`; '<|endoftext|>' inside text is ordinary text or the end-of-document id (`endoftext`)."""
        # Through encode_array: where tiktoken's regex gives up, encode_ordinary panics (and prints a Rust
        # backtrace), encode_to_numpy raises a ValueError.
        return self.encode_array(text).tolist()

    def encode_by_pieces(self, text: str) -> list[int]:
        """The same ids, split by the `regex` module (as Megatron's and OpenAI's encoders split) and each
        piece merged by tiktoken without its own regex. tiktoken's regex engine runs out of backtracking
        stack on a run of whitespace near a million characters long (a junk page can hold one); this path
        takes any text, more slowly, so it serves only the texts tiktoken's regex cannot."""
        if self._allowed_special:
            parts = text.split(EOD_TOKEN)
            return [i for k, part in enumerate(parts) for i in ([self.eod] if k else []) + self._pieces(part)]
        return self._pieces(text)

    def _pieces(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in _PIECES.findall(text):
            ids += self._encoding._encode_single_piece(piece)
        return ids

    def encode_plain(self, text: str) -> list[int]:
        """Ids of text that continues a document: `encode`, since GPT-2 BPE adds no special tokens."""
        return self.encode(text)

    def encode_array(self, text: str) -> np.ndarray:
        """The same ids as a uint32 array, straight from the engine's buffer (no Python ints made)."""
        try:
            return self._encoding.encode_to_numpy(text, allowed_special=self._allowed_special, disallowed_special=())
        except BaseException as exc:
            if not _regex_failure(exc):
                raise
            return np.array(self.encode_by_pieces(text), np.uint32)

    def decode(self, ids: list[int]) -> str:
        return self._encoding.decode(ids, errors="replace")

    def decode_bytes(self, ids: list[int]) -> bytes:
        return self._encoding.decode_bytes(ids)


_PIECES = regex.compile(GPT2_PATTERN)


def _regex_failure(exc: BaseException) -> bool:
    """Whether tiktoken gave up on a text in its regex: a ValueError naming the regex, or a Rust panic of
    its stack (pyo3's PanicException, a BaseException that `except Exception` does not catch)."""
    return (isinstance(exc, ValueError) and "Regex error" in str(exc)) or type(exc).__name__ == "PanicException"


def padded_vocab_size(vocab_size: int, divisible_by: int = 128, tensor_parallel: int = 1) -> int:
    """Megatron's padding: the smallest multiple of divisible_by x tensor_parallel >= vocab_size."""
    multiple = divisible_by * tensor_parallel
    return -(-vocab_size // multiple) * multiple
