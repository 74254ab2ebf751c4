"""Generation in this process: the key/value cache, batching, log-probabilities, sampling, stops and beam search."""

import itertools

import pytest
import torch

from support.generation import PROMPTS, Local
from textmill.inference.generate import SamplingParams, filter_logits


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_cached_generation_equals_recomputing_the_prefix(request, family):
    local = Local(request.getfixturevalue(f"{family}_ckpt"))
    cached = local(PROMPTS, tokens_to_generate=30, top_k=1, logprobs=True)
    plain = local(PROMPTS, tokens_to_generate=30, top_k=1, logprobs=True, use_cache=False)
    for c, p, prompt in zip(cached, plain, PROMPTS, strict=True):
        assert c.tokens == p.tokens and c.finish_reason == p.finish_reason
        assert c.tokens[: c.prompt_length] == local.tokenizer.encode(prompt)
        assert len(c.logprobs) == len(c.tokens) - 1
        assert max(abs(a - b) for a, b in zip(c.logprobs, p.logprobs, strict=True)) < 1e-4
    # Sampled, too: the same seed draws the same tokens with and without the cache.
    sampled = local(PROMPTS, tokens_to_generate=30, top_p=0.9, seed=5)
    again = local(PROMPTS, tokens_to_generate=30, top_p=0.9, seed=5, use_cache=False)
    assert [g.tokens for g in sampled] == [g.tokens for g in again]


def test_batched_prompts_of_different_lengths_generate_as_each_alone(gpt2):
    batch = gpt2(PROMPTS, tokens_to_generate=25, top_k=1, logprobs=True)
    for prompt, together in zip(PROMPTS, batch, strict=True):
        [alone] = gpt2([prompt], tokens_to_generate=25, top_k=1, logprobs=True)
        assert together.tokens == alone.tokens
        assert max(abs(a - b) for a, b in zip(together.logprobs, alone.logprobs, strict=True)) < 1e-4
        # Each generated exactly its own count (Megatron would give short prompts more), unless it hit the end.
        assert len(together.generated) == 25 or together.finish_reason == "eod"


def test_logprobs_are_the_models_own(gpt2):
    [g] = gpt2(["The old sailor repaired"], tokens_to_generate=10, top_k=1, logprobs=True)
    with torch.no_grad():
        logits = gpt2.model(torch.tensor([g.tokens]))[0, :-1, : gpt2.tokenizer.vocab_size]
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(g.tokens[1:])[:, None])[:, 0]
    assert torch.allclose(torch.tensor(g.logprobs), expected, atol=1e-4)
    # Greedy: every generated token is its position's argmax.
    assert logits[g.prompt_length - 1 :].argmax(-1).tolist() == g.generated


def test_sampling_is_seeded_and_filters_as_asked(gpt2):
    a = gpt2(PROMPTS, tokens_to_generate=20, seed=1)
    assert [g.tokens for g in a] == [g.tokens for g in gpt2(PROMPTS, tokens_to_generate=20, seed=1)]
    assert [g.tokens for g in a] != [g.tokens for g in gpt2(PROMPTS, tokens_to_generate=20, seed=2)]

    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    finite = lambda x: torch.isfinite(x)[0].tolist()  # noqa: E731
    assert finite(filter_logits(logits, 2, 0.0)) == [True, True, False, False, False]
    assert finite(filter_logits(logits, 0, 0.6)) == [True, True, False, False, False]  # 0.5 < 0.6: the next one too
    assert finite(filter_logits(logits, 0, 0.5)) == [True, False, False, False, False]
    assert finite(filter_logits(logits, 0, 0.86)) == [True, True, True, True, False]
    # Top-k 3 at a high temperature never draws outside the 3 most likely tokens of each step.
    [g] = gpt2(["The old sailor"], tokens_to_generate=30, top_k=3, temperature=5.0, seed=3, logprobs=True, use_cache=False)
    with torch.no_grad():
        logits = gpt2.model(torch.tensor([g.tokens]))[0, :-1, : gpt2.tokenizer.vocab_size]
    top3 = logits.topk(3, dim=-1).indices[g.prompt_length - 1 :]
    assert all(t in row.tolist() for t, row in zip(g.generated, top3, strict=True))


def test_stops_at_stop_strings_newlines_and_the_end_of_document(gpt2):
    [free] = gpt2(["The old sailor"], tokens_to_generate=40, top_k=1)
    text = gpt2.tokenizer.decode(free.generated)
    stop = text.split()[3]
    [g] = gpt2(["The old sailor"], tokens_to_generate=40, top_k=1, stop=(stop, "never there"))
    assert g.finish_reason == "stop" and g.generated == free.generated[: len(g.generated)]
    assert gpt2.tokenizer.decode(g.generated)[: g.stop_at] == text[: text.find(stop)]
    # Sampled long enough, documents end (the corpus has an end-of-document token after each).
    ends = [g for g in gpt2(PROMPTS * 2, tokens_to_generate=200, seed=1) if g.finish_reason == "eod"]
    assert ends
    for g in ends:
        assert g.tokens[-1] == gpt2.tokenizer.eod and gpt2.tokenizer.eod not in g.generated[:-1]
    [nl] = gpt2(["The old sailor"], tokens_to_generate=200, temperature=1.5, seed=0, stop_on_eol=True)
    newline_at = [i for i, t in enumerate(nl.generated) if b"\n" in gpt2.text.pieces[t]]
    assert newline_at in ([], [len(nl.generated) - 1])


# -- beam search -----------------------------------------------------------------------------------------
def sequence_logprob(model, prompt: list[int], continuation: list[int]) -> float:
    """log p(continuation | prompt) from one forward pass over the whole sequence (no cache)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + continuation]))[0, len(prompt) - 1 : -1].float()
    return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(continuation)[:, None]).sum())


def exhaustive_search(model, prompt: list[int], vocab: int, steps: int, stop: int, length_penalty: float):
    """Every sequence a search of `steps` tokens can end with: those ending at the stop token, and those of
    `steps` tokens without it; best first, by the beam score."""
    ended = []
    for length in range(1, steps + 1):
        for continuation in itertools.product([t for t in range(vocab) if t != stop], repeat=length - 1):
            ended.append(list(continuation) + [stop])
    ended += [list(c) for c in itertools.product([t for t in range(vocab) if t != stop], repeat=steps)]
    scored = [(sequence_logprob(model, prompt, c) / len(c) ** length_penalty, c) for c in ended]
    return sorted(scored, key=lambda pair: -pair[0])


@pytest.fixture(scope="module")
def tiny_model():
    """Five tokens, random weights large enough to make the distributions far from uniform."""
    from textmill.trainer.gpt_config import GPTConfig
    from textmill.trainer.model import GPT

    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=5, num_layers=2, hidden_size=16, num_attention_heads=2,
                         max_position_embeddings=16, init_std=0.5)).eval()


@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.0])
def test_beam_search_as_wide_as_the_tree_equals_exhaustive_search(tiny_model, length_penalty):
    from textmill.inference.beam import beam_search

    prompt, steps, stop = [1, 3], 4, 0
    expected = exhaustive_search(tiny_model, prompt, 5, steps, stop, length_penalty)  # 4^0+..+4^3 + 4^4 = 341
    for use_cache in (True, False):
        params = SamplingParams(tokens_to_generate=steps, beam_width=len(expected), length_penalty=length_penalty,
                                use_cache=use_cache)
        found = beam_search(tiny_model, prompt, params, 5, stop)
        assert [h.generated for h in found] == [c for _, c in expected]
        assert max(abs(h.score - score) for h, (score, _) in zip(found, expected, strict=True)) < 1e-4
        assert all(h.tokens[:2] == prompt and h.finish_reason == ("stop" if h.tokens[-1] == stop else "length") for h in found)


def test_narrow_beams_score_what_they_return_and_width_one_is_greedy(tiny_model, gpt2):
    """A narrow beam reorders its cache every step: each returned score is what one forward pass over the
    whole sequence gives; with a single beam the search is greedy decoding up to the stop token."""
    from textmill.inference.beam import beam_search

    prompt, stop = [2, 4, 1], 0
    for width, penalty in ((2, 1.0), (3, 0.5), (4, 0.0)):
        params = SamplingParams(tokens_to_generate=9, beam_width=width, length_penalty=penalty)
        found = beam_search(tiny_model, prompt, params, 5, stop)
        assert len(found) == width and [h.score for h in found] == sorted((h.score for h in found), reverse=True)
        for h in found:
            assert abs(h.score - sequence_logprob(tiny_model, prompt, h.generated) / len(h.generated) ** penalty) < 1e-4
        assert [h.tokens for h in found] == [h.tokens for h in beam_search(tiny_model, prompt, SamplingParams(
            tokens_to_generate=9, beam_width=width, length_penalty=penalty, use_cache=False), 5, stop)]
    vocab, eod = gpt2.tokenizer.vocab_size, gpt2.tokenizer.eod
    for prompt in PROMPTS:
        ids = gpt2.tokenizer.encode(prompt)
        [greedy] = gpt2([prompt], tokens_to_generate=30, top_k=1)
        [best] = beam_search(gpt2.model, ids, SamplingParams(tokens_to_generate=30, beam_width=1), vocab, eod)
        assert best.tokens == greedy.tokens
        assert abs(best.score - sequence_logprob(gpt2.model, ids, best.generated) / len(best.generated)) < 1e-4


def test_generation_asks_before_each_token_and_stops_when_told(gpt2, tiny_model):
    """The server's cancellation: `stopped` is asked once before each token; generation and beam search end
    with Cancelled at the first True, having made no more tokens than the questions answered False."""
    from textmill.inference.beam import beam_search
    from textmill.inference.generate import Cancelled, generate

    for after in (0, 3):
        asked = []

        def stopped(asked=asked, after=after):
            asked.append(True)
            return len(asked) > after

        ids = [gpt2.tokenizer.encode(p) for p in PROMPTS]
        with pytest.raises(Cancelled):
            generate(gpt2.model, gpt2.text, ids, SamplingParams(tokens_to_generate=50, top_k=1), gpt2.tokenizer.eod,
                     stopped=stopped)
        assert len(asked) == after + 1
        asked.clear()
        with pytest.raises(Cancelled):
            beam_search(tiny_model, [1, 3], SamplingParams(tokens_to_generate=8, beam_width=2), 5, 0, stopped=stopped)
        assert len(asked) == after + 1
    [g] = generate(gpt2.model, gpt2.text, [ids[0]], SamplingParams(tokens_to_generate=12, top_k=1), gpt2.tokenizer.eod,
                   stopped=lambda: False)
    assert g.tokens == gpt2([PROMPTS[0]], tokens_to_generate=12, top_k=1)[0].tokens
