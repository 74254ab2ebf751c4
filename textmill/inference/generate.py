"""Batched autoregressive generation with a key/value cache, as Megatron-LM's text generation does it.

A batch of prompts of different lengths shares one position counter: the forward pass first reads every
row's first `min(prompt lengths)` tokens at once, then one position per step. A row whose prompt is longer
than the current position takes its own next prompt token instead of a sampled one, so no row is padded
and causal attention needs no per-row mask. With the cache each step reads one new position; without it
(`use_cache=False`, for tests and benchmarks) each step reads the whole prefix again.

Sampling, per step: logits of the real vocabulary only (padding rows are not tokens), divided by the
temperature, cut to the top k or to the smallest set of tokens whose probability reaches top p, then
drawn with the request's own seeded generator. top_k == 1 is greedy (argmax), as in Megatron.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from textmill.trainer.model import KVCache


class Cancelled(Exception):
    """Generation given up between two tokens: no one waits for its answer any more."""


@dataclass
class SamplingParams:
    tokens_to_generate: int = 64
    temperature: float = 1.0
    top_k: int = 0  # 0: no top-k cut; 1: greedy
    top_p: float = 0.0  # 0: no nucleus cut
    top_p_decay: float = 0.0  # after each token top_p *= decay, down to top_p_bound (Megatron's option)
    top_p_bound: float = 0.0
    seed: int | None = None  # None: a fresh random seed
    stop: tuple[str, ...] = ()  # stop once the generated text contains one of these
    stop_on_eol: bool = False  # stop after a token holding a newline
    stop_on_double_eol: bool = False  # stop after a token holding an empty line
    prevent_newline_after_colon: bool = False
    logprobs: bool = False  # log-probability of every token after the first
    use_cache: bool = True
    beam_width: int = 0  # > 0: beam search (inference/beam.py) instead of sampling
    stop_token: int | None = None  # the token that ends a beam (None: the end-of-document token)
    length_penalty: float = 1.0  # a beam's score is its log-probability / generated length ** length_penalty

    @property
    def greedy(self) -> bool:
        return self.top_k == 1


@dataclass
class Generation:
    tokens: list[int]  # prompt + generated tokens, up to and including the one that ended it
    prompt_length: int
    finish_reason: str  # "length", "eod" (the end-of-document token), "stop" (a stop string or newline)
    logprobs: list[float] | None = None  # log p(tokens[i] | tokens[:i]) for i >= 1
    stop_at: int | None = field(default=None, repr=False)  # character offset of a stop string in the generated text
    score: float | None = None  # beam search: the hypothesis' length-normalised log-probability

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_length :]


class TokenText:
    """Per-token byte strings of a tokenizer, computed once: to test newlines and stop strings without
    decoding whole sequences."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.pieces = [tokenizer.decode_bytes([i]) for i in range(tokenizer.vocab_size)]
        self.newline = torch.tensor([b"\n" in p for p in self.pieces])
        self.double_newline = [b"\n\n" in p for p in self.pieces]
        self.colon_end = torch.tensor([p.endswith(b":") for p in self.pieces])

    def ban_newline_after_colon(self, logits: torch.Tensor, previous: torch.Tensor) -> None:
        """Megatron's prevent_newline_after_colon: in rows whose previous token ends with a colon, no token
        holding a newline can come next. `logits` [rows, vocab] is changed in place."""
        after_colon = self.colon_end[previous.cpu()]
        logits[after_colon[:, None] & self.newline[None, : logits.shape[-1]]] = float("-inf")

    def segment(self, token: int) -> str:
        """The token on its own, decoded with replacement characters (Megatron's `segments`)."""
        return self.pieces[token].decode("utf-8", errors="replace")


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set to -inf every logit outside the top k of its row, or outside the smallest set of most likely
    tokens whose probabilities sum to at least top_p (the token that crosses top_p is kept)."""
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p > 0.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        before = ordered.softmax(dim=-1).cumsum(dim=-1) - ordered.softmax(dim=-1)  # mass of the tokens ahead
        drop = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, order, before >= top_p)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@torch.no_grad()
def generate(model, text: TokenText, prompts: list[list[int]], params: SamplingParams, eod: int,
             dtype: torch.dtype | None = None, stopped: Callable[[], bool] | None = None) -> list[Generation]:
    """Continue each prompt (a non-empty list of token ids) by up to params.tokens_to_generate tokens.
    `stopped`, asked before each token, ends the generation with Cancelled when it says so."""
    device = next(model.parameters()).device
    vocab = text.tokenizer.vocab_size
    lengths = torch.tensor([len(p) for p in prompts])
    if lengths.min() < 1:
        raise ValueError("every prompt needs at least one token")
    ends = lengths + params.tokens_to_generate  # exclusive end position of each row
    total = int(ends.max())
    if total > model.config.max_position_embeddings:
        raise ValueError(f"prompt and generation need {total} positions; the model has "
                         f"{model.config.max_position_embeddings}")
    B = len(prompts)
    tokens = torch.full((B, total), eod, dtype=torch.long)
    for row, p in enumerate(prompts):
        tokens[row, : len(p)] = torch.tensor(p)
    tokens = tokens.to(device)
    logprobs = torch.zeros(B, total) if params.logprobs else None
    finish = ["length"] * B
    final = ends.clone()  # each row's length when it is done
    done = ends == lengths  # rows with nothing to generate (scoring their prompt only)
    generator = torch.Generator(device="cpu")
    generator.manual_seed(params.seed if params.seed is not None else torch.seed())
    cache = KVCache(total) if params.use_cache else None
    top_p = params.top_p
    stop_bytes = max((len(s.encode()) for s in params.stop), default=0)

    def forward(start: int, end: int) -> torch.Tensor:
        """fp32 logits of the real vocabulary on the host: at positions [start, end) when log-probabilities
        are asked for, else at the last position alone (the only one sampling reads)."""
        window = tokens[:, start:end] if cache is not None else tokens[:, :end]
        kept = end - start if logprobs is not None else 1
        return model(window, cache=cache)[:, -kept:, :vocab].float().cpu()

    def score(logits: torch.Tensor, start: int, end: int) -> None:
        """Log-probabilities of the known tokens at positions [start + 1, end + 1) from logits at [start, end)."""
        if logprobs is not None and end > start:
            targets = tokens[:, start + 1 : end + 1].cpu()
            chosen = F.log_softmax(logits[:, : end - start], dim=-1).gather(-1, targets[..., None])
            logprobs[:, start + 1 : end + 1] = chosen[..., 0]

    def busy(pos: int) -> bool:
        """Whether any row still generates, or still has prompt tokens to read, at `pos`."""
        return pos < total and bool((~done | (lengths > pos)).any())

    # One autocast context for the whole generation: the weights are cast to `dtype` once (autocast keeps
    # the casts while its context lasts), not at every token.
    with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        pos = int(lengths.min())
        logits = forward(0, pos)
        score(logits, 0, pos - 1)
        while busy(pos):
            if stopped is not None and stopped():
                raise Cancelled
            last = logits[:, -1] / params.temperature
            if params.prevent_newline_after_colon:
                text.ban_newline_after_colon(last, tokens[:, pos - 1])
            if params.greedy:
                chosen = last.argmax(dim=-1)
            else:
                probs = filter_logits(last, params.top_k, top_p).softmax(dim=-1)
                chosen = torch.multinomial(probs, 1, generator=generator)[:, 0]
                if params.top_p_decay > 0.0:
                    top_p = max(top_p * params.top_p_decay, params.top_p_bound)
            generating = (lengths <= pos) & ~done
            # Rows still inside their prompt keep their own token; finished rows keep generating into
            # positions nobody reads (causal attention keeps them from touching earlier positions).
            tokens[:, pos] = torch.where(generating, chosen, tokens[:, pos].cpu()).to(device)
            if logprobs is not None:
                logprobs[:, pos] = F.log_softmax(logits[:, -1], dim=-1).gather(-1, tokens[:, pos, None].cpu())[:, 0]
            for row in generating.nonzero()[:, 0].tolist():
                reason = stop_reason(tokens[row, : pos + 1].tolist(), int(lengths[row]), eod, text, params, stop_bytes)
                if reason is None and pos + 1 < ends[row]:
                    continue
                done[row], final[row] = True, pos + 1
                finish[row] = reason or "length"
            pos += 1
            if busy(pos):
                logits = forward(pos - 1, pos)
    out = []
    for row in range(B):
        n = int(final[row])
        row_tokens = tokens[row, :n].tolist()
        g = Generation(row_tokens, int(lengths[row]), finish[row],
                       logprobs[row, 1:n].tolist() if logprobs is not None else None)
        if finish[row] == "stop" and params.stop:
            g.stop_at = first_stop(text.tokenizer.decode(g.generated), params.stop)
        out.append(g)
    return out


def stop_reason(row: list[int], prompt_length: int, eod: int, text: TokenText, params: SamplingParams,
                stop_bytes: int) -> str | None:
    """Why the row ends at its last token, or None if it goes on."""
    token = row[-1]
    if token == eod:
        return "eod"
    if params.stop_on_double_eol and text.double_newline[token]:
        return "stop"
    if params.stop_on_eol and bool(text.newline[token]):
        return "stop"
    if stop_bytes:
        # A stop string ending at this token lies within its last stop_bytes tokens (each is >= 1 byte).
        tail = text.tokenizer.decode(row[max(prompt_length, len(row) - stop_bytes - 1) :])
        if first_stop(tail, params.stop) is not None:
            return "stop"
    return None


def first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    found = [text.find(s) for s in stops if s and s in text]
    return min(found) if found else None
