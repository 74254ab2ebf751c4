"""Bits per byte of held-out text: how well a model predicts text, in a unit that does not depend on its tokenizer.

Loss per token cannot compare two models whose BPEs differ (an ablation trains a BPE on each variant's corpus: a
vocabulary that cuts text into fewer tokens has a higher loss per token for the same text). Bits per byte can:

    bits per byte = (sum over the text's tokens of -ln p(token | the tokens before it)) / (ln 2 x UTF-8 bytes)

Each text is its tokens after the end-of-document token (what the model saw before every document it trained
on), so every token of the text is predicted, the first one included. A text longer than the model's positions
is read in consecutive windows of that many tokens, each predicted from the window's own tokens (the first
token of a window from nothing but the previous one): the text's every token is counted once. As the GPT-2
paper and lm-evaluation-harness report it, byte counts are the text's own, end-of-document tokens are not
predicted, and log-probabilities range over the real vocabulary only (not the padding rows).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from textmill.errors import TextmillError
from textmill.io.progress import progress as progress_counter


# The held-out split of a model's own corpus: its first documents, each variant's own text.
OWN_SPLIT, OWN_SPLIT_DOCUMENTS = "own_held_out", 200


def read_texts(path: Path) -> list[str]:
    """The texts of a held-out file: the "text" of each line of a JSON-lines file (.jsonl, LAMBADA's format);
    any other file is one text, as UTF-8."""
    from textmill.io.files import JSON_LINE_REASONS, iter_json_lines

    path = Path(path)
    try:
        if path.suffix != ".jsonl":
            text = path.read_text(encoding="utf-8")
            if not text.strip():
                raise TextmillError(f"{path}: no text")
            return [text]
        texts = []
        for n, _, obj, reason in iter_json_lines(path):
            if reason:
                raise TextmillError(f"{path}:{n}: {JSON_LINE_REASONS[reason]}")
            text = obj.get("text") if isinstance(obj, dict) else None
            if not isinstance(text, str) or not text.strip():
                raise TextmillError(f"{path}:{n}: expected a JSON object with a non-empty \"text\" string")
            texts.append(text)
    except UnicodeDecodeError as exc:
        raise TextmillError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise TextmillError(f"{path}: {exc.strerror or exc}") from None
    if not texts:
        raise TextmillError(f"{path}: no texts")
    return texts


def windows(tokens: list[int], width: int) -> list[tuple[list[int], list[int]]]:
    """(inputs, targets) of consecutive windows of at most `width` predictions covering tokens[1:] once."""
    pieces = []
    for start in range(0, len(tokens) - 1, width):
        stop = min(start + width, len(tokens) - 1)
        pieces.append((tokens[start:stop], tokens[start + 1:stop + 1]))
    return pieces


@torch.no_grad()
def bits_per_byte(model, tokenizer, texts: list[str], vocab_size: int, batch_size: int = 8,
                  device: str | torch.device = "cpu", dtype: torch.dtype | None = None, progress: bool = False) -> dict:
    """The bits per byte of `texts` under `model` (in eval mode), with the tokens and bytes they were over."""
    width = model.config.max_position_embeddings
    pieces = [w for text in texts for w in windows([tokenizer.eod, *tokenizer.encode_plain(text)], width)]
    total_bytes = sum(len(text.encode("utf-8")) for text in texts)
    order = sorted(range(len(pieces)), key=lambda i: -len(pieces[i][0]))  # longest first: little padding
    nll = 0.0
    bar = progress_counter(total=len(pieces), unit="window", desc="bits per byte", leave=False, enabled=progress)
    with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None):
        for start in range(0, len(order), batch_size):
            batch = [pieces[i] for i in order[start:start + batch_size]]
            length = max(len(inputs) for inputs, _ in batch)
            ids = torch.full((len(batch), length), tokenizer.eod, dtype=torch.long)
            targets = torch.full((len(batch), length), -100, dtype=torch.long)  # padding is not scored
            for row, (inputs, wanted) in enumerate(batch):
                ids[row, :len(inputs)] = torch.tensor(inputs)
                targets[row, :len(wanted)] = torch.tensor(wanted)
            logits = model(ids.to(device))[..., :vocab_size].float()
            nll += F.cross_entropy(logits.reshape(-1, vocab_size), targets.to(device).reshape(-1), ignore_index=-100,
                                   reduction="sum").item()
            bar.update(len(batch))
    bar.close()
    tokens = sum(len(wanted) for _, wanted in pieces)
    return {"bits_per_byte": nll / math.log(2) / total_bytes, "bytes": total_bytes, "tokens": tokens,
            "texts": len(texts), "nats": nll}


def split_texts(prefix: Path, split: str, tokenizer, limit: int = OWN_SPLIT_DOCUMENTS) -> list[str]:
    """The first `limit` documents of a token file's held-out split (its test range; its validation range when
    the test range is empty), decoded back to text (GPT-2's BPE is byte-level: decoding gives the text back)."""
    from textmill.megatron.indexed import IndexedDataset
    from textmill.trainer.data import split_ranges

    data = IndexedDataset(prefix)
    _, valid, test = split_ranges(len(data), split)
    chosen = test if test is not None else valid
    if chosen is None:
        return []
    return [tokenizer.decode([t for t in data[int(i)].tolist() if t != tokenizer.eod]) for i in chosen[:limit]]


def evaluate_bits_per_byte(load: Path, files: list[Path], own_split: tuple[Path, str] | None = None,
                           device: str = "cpu", batch_size: int = 8, progress: bool = False) -> list[dict]:
    """The bits per byte of the newest checkpoint under `load` on each held-out file, and on the held-out split of
    the token files it was trained on (`own_split`: their prefix and the trainer's --split), the model read once."""
    from textmill.io.files import file_fingerprint
    from textmill.trainer.checkpoint import checkpoint_tokenizer, load_model

    model, ckpt = load_model(load, device)
    tokenizer = checkpoint_tokenizer(load, ckpt.meta, None, None)

    def measured(texts: list[str]) -> dict:
        return bits_per_byte(model, tokenizer, texts, tokenizer.vocab_size, batch_size, device, progress=progress)

    results = [{"name": Path(path).stem, "file": str(path), "sha256": file_fingerprint(Path(path))["sha256"],
                **measured(read_texts(path))} for path in files]
    own = split_texts(*own_split, tokenizer) if own_split else []
    if own:
        results.append({"name": OWN_SPLIT, "file": str(own_split[0]), **measured(own)})
    return results
