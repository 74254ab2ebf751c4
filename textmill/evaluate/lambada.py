"""LAMBADA last-word prediction, scored as Megatron-LM's tasks/zeroshot_gpt does (docs/REFERENCE.md section 5).

Each passage splits into a context and a target:
  - default: the target is the passage's last BPE token (often only a piece of the last word);
  - strict (--strict-lambada): the target is the whole last word, `text.split()[-1]` with any punctuation
    attached, tokenized with its leading space; the context is the text before it, stripped.
A passage is correct when greedy, teacher-forced prediction gets every target token right. Accuracy is
correct / passages. Perplexity is exp of the mean over passages of the target's summed negative
log-likelihood (per-word perplexity, as the GPT-2 paper and lm-evaluation-harness report it).

Two choices Megatron does not make: argmax and log-probabilities range over the real vocabulary only (the
padding rows are not tokens), and a passage longer than the model's positions keeps its last tokens
(counted as `truncated`) instead of failing the whole run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from textmill.errors import TextmillError
from textmill.io.progress import progress as progress_counter


@dataclass
class Cloze:
    context: list[int]
    target: list[int]


def read_clozes(path: Path, tokenizer, strict: bool) -> list[Cloze]:
    """One cloze per line of a LAMBADA JSON-lines file ({"text": ...}); any other line is an error."""
    from textmill.io.files import JSON_LINE_REASONS, iter_json_lines

    clozes = []
    try:
        for n, _, obj, reason in iter_json_lines(Path(path)):
            if reason:
                raise TextmillError(f"{path}:{n}: {JSON_LINE_REASONS[reason]}")
            text = obj.get("text") if isinstance(obj, dict) else None
            if not isinstance(text, str) or not text.split():
                raise TextmillError(f"{path}:{n}: expected a JSON object with a non-empty \"text\" string")
            cloze = make_cloze(text, tokenizer, strict)
            if not cloze.context:
                raise TextmillError(f"{path}:{n}: the passage has nothing before its last word to predict it from")
            clozes.append(cloze)
    except OSError as exc:
        raise TextmillError(f"{path}: {exc.strerror or exc}") from None
    if not clozes:
        raise TextmillError(f"{path}: no passages")
    return clozes


def make_cloze(text: str, tokenizer, strict: bool) -> Cloze:
    if strict:
        word = text.split()[-1]
        # The target continues the context: no special tokens of its own (a LLaMA tokenizer's BOS)
        return Cloze(tokenizer.encode(text[: text.rfind(word)].strip()), tokenizer.encode_plain(" " + word))
    tokens = tokenizer.encode(text)
    return Cloze(tokens[:-1], tokens[-1:])


@torch.no_grad()
def score_clozes(model, clozes: list[Cloze], vocab_size: int, pad_id: int, batch_size: int = 8,
                 device: str | torch.device = "cpu", dtype: torch.dtype | None = None, progress: bool = False) -> dict:
    """Greedy exact-match accuracy and last-word perplexity of `model` on `clozes`.

    The model reads context + target minus the last token; the logits at the target positions are
    compared with the target. Batches are right-padded with `pad_id`; causal attention keeps padding from
    touching the positions scored, so padding to the batch's longest passage gives Megatron's numbers."""
    limit = model.config.max_position_embeddings
    inputs, truncated = [], 0
    for c in clozes:
        tokens = c.context + c.target
        if len(tokens) - 1 > limit:
            tokens, truncated = tokens[len(tokens) - 1 - limit:], truncated + 1
        inputs.append(tokens)
    # Longest first so each batch pads little; the result does not depend on the order.
    order = sorted(range(len(clozes)), key=lambda i: -len(inputs[i]))
    correct, nll = [0] * len(clozes), [0.0] * len(clozes)
    bar = progress_counter(total=len(clozes), unit="passage", desc="lambada", leave=False, enabled=progress)
    # One autocast context for every batch (the weights cast once); only the target positions' log-
    # probabilities leave the device.
    with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None):
        for start in range(0, len(order), batch_size):
            ids = order[start : start + batch_size]
            width = max(len(inputs[i]) for i in ids) - 1
            batch = torch.full((len(ids), width), pad_id, dtype=torch.long)
            for row, i in enumerate(ids):
                batch[row, : len(inputs[i]) - 1] = torch.tensor(inputs[i][:-1])
            logits = model(batch.to(device))
            for row, i in enumerate(ids):
                n, t = len(inputs[i]), len(clozes[i].target)
                predicted = F.log_softmax(logits[row, n - 1 - t : n - 1, :vocab_size].float(), dim=-1).cpu()
                target = torch.tensor(clozes[i].target)
                correct[i] = int(torch.equal(predicted.argmax(-1), target))
                nll[i] = -predicted.gather(1, target[:, None]).sum().item()
            bar.update(len(ids))
    bar.close()
    return {
        "correct": sum(correct),
        "total": len(clozes),
        "accuracy": sum(correct) / len(clozes),
        "perplexity": math.exp(sum(nll) / len(clozes)),
        "truncated": truncated,
        "target_tokens_mean": sum(len(c.target) for c in clozes) / len(clozes),
    }


def evaluate_lambada(load: Path, valid_data: Path, strict: bool = False, vocab_file=None, merge_file=None,
                     batch_size: int = 8, device: str = "cpu", bf16: bool = False, output: Path | None = None,
                     progress: bool = False) -> dict:
    """Score the newest checkpoint under `load` on a LAMBADA file and write the result as JSON
    (default `<load>/lambada[-strict].json`)."""
    from textmill.io.files import file_fingerprint, write_json
    from textmill.trainer.checkpoint import checkpoint_tokenizer, load_model

    model, ckpt = load_model(load, device)
    tokenizer = checkpoint_tokenizer(load, ckpt.meta, vocab_file, merge_file)
    clozes = read_clozes(valid_data, tokenizer, strict)
    result = score_clozes(model, clozes, tokenizer.vocab_size, tokenizer.eod, batch_size, device,
                          torch.bfloat16 if bf16 else None, progress)
    result = {"task": "LAMBADA", "strict": strict, "valid_data": str(valid_data),
              "valid_data_file": file_fingerprint(Path(valid_data)), "checkpoint": str(load),
              "iteration": "release" if ckpt.release else ckpt.meta["iteration"], **result}
    output = output or Path(load) / f"lambada{'-strict' if strict else ''}.json"
    write_json(result, output)
    result["output"] = str(output)
    return result
