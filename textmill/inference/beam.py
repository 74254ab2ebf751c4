"""Beam search, as Megatron-LM's text generation server did it (`beam_width`, `stop_token`, `length_penalty`).

One prompt at a time. The search keeps up to `width` open sequences ("beams") and their summed
log-probabilities. Each step it ranks every one-token continuation of every beam and walks the best
`2 * width` of them in order:
- a continuation with the stop token finishes a hypothesis, if it ranks among the first `width`;
- any other continuation becomes a beam of the next step, until there are `width` of them.
A hypothesis scores `sum of log-probabilities / generated tokens ** length_penalty`, its stop token
counted; the best `width` are kept. The search ends when `width` hypotheses are finished and none of the
open beams could score better (the test Hugging Face's and Megatron's BeamHypotheses use), or when
`tokens_to_generate` tokens are generated; beams still open then are scored as they stand. The answer
is every kept hypothesis, best first.

The key/value cache holds one row per beam; after each step it keeps the rows of the beams that go on,
in their new order.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from textmill.inference.generate import Cancelled, Generation, SamplingParams, TokenText
from textmill.trainer.model import KVCache


class Hypotheses:
    """The best `width` finished hypotheses seen so far, as (score, tokens)."""

    def __init__(self, width: int, length_penalty: float):
        self.width, self.length_penalty = width, length_penalty
        self.kept: list[tuple[float, list[int]]] = []

    def score(self, logprob: float, length: int) -> float:
        return logprob / length**self.length_penalty

    def add(self, tokens: list[int], logprob: float, length: int) -> None:
        self.kept.append((self.score(logprob, length), tokens))
        # Stable: of equal scores the earlier-found hypothesis stays ahead.
        self.kept.sort(key=lambda hypothesis: -hypothesis[0])
        del self.kept[self.width :]

    def done(self, best_open_logprob: float, length: int) -> bool:
        """Whether no open beam, scored at its current length, beats the worst kept hypothesis."""
        return len(self.kept) == self.width and self.kept[-1][0] >= self.score(best_open_logprob, length)


@torch.no_grad()
def beam_search(model, prompt: list[int], params: SamplingParams, vocab_size: int, stop_token: int,
                text: TokenText | None = None, dtype: torch.dtype | None = None,
                stopped: Callable[[], bool] | None = None) -> list[Generation]:
    """The best `params.beam_width` continuations of `prompt` (token ids) by beam search, best first.
    `vocab_size` is the number of real tokens (padding rows of the output layer are never chosen); `text`
    is needed only for params.prevent_newline_after_colon; `stopped`, asked before each token, ends the
    search with Cancelled when it says so."""
    width, prompt_length = params.beam_width, len(prompt)
    total = prompt_length + params.tokens_to_generate
    if width < 1 or params.tokens_to_generate < 1 or not prompt:
        raise ValueError("beam search needs a width, a prompt and at least one token to generate")
    if total > model.config.max_position_embeddings:
        raise ValueError(f"prompt and generation need {total} positions; the model has "
                         f"{model.config.max_position_embeddings}")
    device = next(model.parameters()).device
    cache = KVCache(total) if params.use_cache else None
    beams = torch.tensor([prompt], dtype=torch.long, device=device)  # [beams, tokens so far]
    scores = torch.zeros(1)  # summed log-probabilities of the generated tokens of each beam
    finished = Hypotheses(width, params.length_penalty)

    def next_logprobs() -> torch.Tensor:
        """[beams, vocab] log-probabilities of each beam's next token."""
        window = beams[:, -1:] if cache is not None and cache.length else beams
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(window, cache=cache)[:, -1, :vocab_size].float().cpu()
        if params.prevent_newline_after_colon:
            text.ban_newline_after_colon(logits, beams[:, -1])
        return F.log_softmax(logits, dim=-1)

    ended = False
    for length in range(1, params.tokens_to_generate + 1):
        if stopped is not None and stopped():
            raise Cancelled
        candidates = (next_logprobs() + scores[:, None]).flatten()
        ranked_scores, ranked = torch.sort(candidates, descending=True, stable=True)
        rows, tokens, kept_scores = [], [], []
        best = zip(ranked_scores[: 2 * width].tolist(), ranked[: 2 * width].tolist(), strict=True)
        for rank, (score, index) in enumerate(best):
            row, token = divmod(index, vocab_size)
            if token == stop_token:
                if rank < width:
                    finished.add(beams[row].tolist() + [token], score, length)
            else:
                rows.append(row), tokens.append(token), kept_scores.append(score)
                if len(rows) == width:
                    break
        if finished.done(float(ranked_scores[0]), length) or not rows:
            ended = True
            break
        order = torch.tensor(rows, device=device)
        beams = torch.cat([beams.index_select(0, order), torch.tensor(tokens, device=device)[:, None]], dim=1)
        scores = torch.tensor(kept_scores)
        if cache is not None:
            cache.reorder(order)
    if not ended:
        for row in range(len(beams)):
            finished.add(beams[row].tolist(), float(scores[row]), params.tokens_to_generate)
    # An open beam never ends with the stop token, so a hypothesis that does was finished by it.
    return [Generation(tokens, prompt_length, "stop" if tokens[-1] == stop_token else "length", score=score)
            for score, tokens in finished.kept]
