"""Text generation: the key/value cache, sampling, the Megatron-compatible server and the client."""

import itertools
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from textmill.trainer.checkpoint import checkpoint_tokenizer, load_model
from textmill.inference.generate import SamplingParams, TokenText, filter_logits, generate

from conftest import run_cli

PROMPTS = ["The old sailor", "In the morning the village was quiet and the", "A", "Seven small boats sailed past the"]


class Local:
    """A checkpoint loaded in this process, generating as the server does."""

    def __init__(self, ckpt):
        self.model, meta = load_model(ckpt)
        self.tokenizer = checkpoint_tokenizer(ckpt, meta.meta)
        self.text = TokenText(self.tokenizer)

    def __call__(self, prompts, **settings):
        ids = [self.tokenizer.encode(p) for p in prompts]
        return generate(self.model, self.text, ids, SamplingParams(**settings), self.tokenizer.eod)


@pytest.fixture(scope="module")
def gpt2(gpt2_ckpt):
    return Local(gpt2_ckpt)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_cached_generation_equals_recomputing_the_prefix(request, family):
    local = Local(request.getfixturevalue(f"{family}_ckpt"))
    cached = local(PROMPTS, tokens_to_generate=30, top_k=1, logprobs=True)
    plain = local(PROMPTS, tokens_to_generate=30, top_k=1, logprobs=True, use_cache=False)
    for c, p, prompt in zip(cached, plain, PROMPTS):
        assert c.tokens == p.tokens and c.finish_reason == p.finish_reason
        assert c.tokens[: c.prompt_length] == local.tokenizer.encode(prompt)
        assert len(c.logprobs) == len(c.tokens) - 1
        assert max(abs(a - b) for a, b in zip(c.logprobs, p.logprobs)) < 1e-4
    # Sampled, too: the same seed draws the same tokens with and without the cache.
    sampled = local(PROMPTS, tokens_to_generate=30, top_p=0.9, seed=5)
    assert [g.tokens for g in sampled] == [g.tokens for g in local(PROMPTS, tokens_to_generate=30, top_p=0.9, seed=5, use_cache=False)]


def test_batched_prompts_of_different_lengths_generate_as_each_alone(gpt2):
    batch = gpt2(PROMPTS, tokens_to_generate=25, top_k=1, logprobs=True)
    for prompt, together in zip(PROMPTS, batch):
        [alone] = gpt2([prompt], tokens_to_generate=25, top_k=1, logprobs=True)
        assert together.tokens == alone.tokens
        assert max(abs(a - b) for a, b in zip(together.logprobs, alone.logprobs)) < 1e-4
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


def test_greedy_equals_transformers_generate_on_the_export(gpt2, gpt2_ckpt, tmp_path):
    from transformers import AutoModelForCausalLM

    assert run_cli("export", "hf", "--load", str(gpt2_ckpt), "--output", str(tmp_path / "hf")).returncode == 0
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    for prompt in PROMPTS:
        [ours] = gpt2([prompt], tokens_to_generate=40, top_k=1)
        ids = torch.tensor([gpt2.tokenizer.encode(prompt)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=40, do_sample=False,
                                 pad_token_id=gpt2.tokenizer.eod)[0].tolist()
        assert ours.tokens == theirs[: len(ours.tokens)]
        assert ours.finish_reason == "eod" or len(theirs) == len(ours.tokens)
    # Greedy output of a model this small soon repeats itself; sampled sequences test the cache harder:
    # their cached log-probabilities are what transformers computes for the same tokens.
    for g in gpt2(PROMPTS, tokens_to_generate=60, seed=7, logprobs=True):
        with torch.no_grad():
            logits = hf(torch.tensor([g.tokens])).logits[0, :-1]
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(g.tokens[1:])[:, None])[:, 0]
        assert torch.allclose(torch.tensor(g.logprobs), expected, atol=1e-4)


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
    assert all(t in row.tolist() for t, row in zip(g.generated, top3))


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
    from textmill.trainer.config import GPTConfig
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
        assert max(abs(h.score - score) for h, (score, _) in zip(found, expected)) < 1e-4
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


# -- the server ------------------------------------------------------------------------------------------
class Server:
    def __init__(self, ckpt, *flags):
        self.proc = subprocess.Popen([sys.executable, "-m", "textmill.cli", "serve", "--load", str(ckpt), "--port", "0", *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        banner = self.proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", banner)
        assert match, banner + self.proc.stderr.read()
        self.url = f"http://127.0.0.1:{match.group(1)}"

    def request(self, method, path, body=None, raw: bytes | None = None, headers=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self):
        self.proc.terminate()
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err


@pytest.fixture(scope="module")
def server(gpt2_ckpt):
    s = Server(gpt2_ckpt, "--max-prompts", "8", "--max-prompt-tokens", "100")
    yield s
    if s.proc.poll() is None:
        s.stop()


def test_api_answers_megatrons_request_with_megatrons_shape(server, gpt2):
    status, body = server.request("PUT", "/api", {"prompts": PROMPTS[:2], "tokens_to_generate": 12, "top_k": 1, "logprobs": True})
    assert status == 200 and set(body) == {"text", "segments", "logprobs"}
    expected = gpt2(PROMPTS[:2], tokens_to_generate=12, top_k=1, logprobs=True)
    for i, g in enumerate(expected):
        assert body["text"][i] == gpt2.tokenizer.decode(g.tokens) and body["text"][i].startswith(PROMPTS[i])
        assert body["segments"][i] == [gpt2.text.segment(t) for t in g.tokens]
        assert len(body["logprobs"][i]) == len(body["segments"][i]) - 1
        assert max(abs(a - b) for a, b in zip(body["logprobs"][i], g.logprobs)) < 1e-4
    # Defaults as Megatron's: 64 tokens, no logprobs; the seed makes sampling repeatable.
    status, body = server.request("PUT", "/api", {"prompts": ["The old sailor"], "random_seed": 4})
    assert status == 200 and body["logprobs"] is None
    prompt_tokens = len(gpt2.tokenizer.encode("The old sailor"))
    assert len(body["segments"][0]) == prompt_tokens + 64 or body["segments"][0][-1] == "<|endoftext|>"
    assert server.request("PUT", "/api", {"prompts": ["The old sailor"], "random_seed": 4})[1] == body
    # Scoring only: tokens_to_generate 0 with logprobs gives the prompt's log-probabilities.
    status, body = server.request("PUT", "/api", {"prompts": ["", "The old sailor"], "tokens_to_generate": 0,
                                                  "logprobs": True, "add_BOS": True})
    assert status == 200 and body["segments"][1][0] == "<|endoftext|>" and len(body["logprobs"][1]) == prompt_tokens
    assert body["text"] == ["<|endoftext|>", "<|endoftext|>The old sailor"]


def test_api_beam_search_answers_as_megatrons_server_did(server, gpt2):
    from textmill.inference.beam import beam_search

    status, body = server.request("PUT", "/api", {"prompts": ["The old sailor"], "tokens_to_generate": 12, "beam_width": 3,
                                                  "length_penalty": 0.7})
    assert status == 200 and set(body) == {"text", "segments", "scores"} and len(body["text"]) == 3
    ids = gpt2.tokenizer.encode("The old sailor")
    local = beam_search(gpt2.model, ids, SamplingParams(tokens_to_generate=12, beam_width=3, length_penalty=0.7),
                        gpt2.tokenizer.vocab_size, gpt2.tokenizer.eod)
    assert body["text"] == [gpt2.tokenizer.decode(h.tokens) for h in local]
    assert body["segments"] == [[gpt2.text.segment(t) for t in h.tokens] for h in local]
    assert body["scores"] == sorted(body["scores"], reverse=True)
    assert max(abs(a - h.score) for a, h in zip(body["scores"], local)) < 1e-4
    # A stop token of the caller's choice ends a sequence there.
    space = gpt2.tokenizer.encode(" the")[0]
    status, body = server.request("PUT", "/api", {"prompts": ["The old sailor"], "tokens_to_generate": 12, "beam_width": 2,
                                                  "stop_token": space})
    assert status == 200 and all(s[-1] == " the" or len(s) == len(ids) + 12 for s in body["segments"])


BAD_REQUESTS = [
    ({}, "prompts argument required"),
    ({"sentences": ["a"]}, "sentences is no longer used.  Replace with prompts"),
    ({"prompts": ["a"], "max_len": 5}, "max_len is no longer used.  Replace with tokens_to_generate"),
    ({"prompts": "a"}, "prompts is not a list of strings"),
    ({"prompts": [1]}, "prompts is not a list of strings"),
    ({"prompts": []}, "prompts is empty"),
    ({"prompts": ["a"] * 9}, "Maximum number of prompts is 8"),
    ({"prompts": ["a"], "tokens_to_generate": "5"}, "tokens_to_generate must be an integer greater than 0"),
    ({"prompts": ["a"], "tokens_to_generate": -1}, "tokens_to_generate must be an integer greater than or equal to 0"),
    ({"prompts": ["a"], "tokens_to_generate": 10**9}, "more than the limit"),
    ({"prompts": ["a"], "tokens_to_generate": 0}, "tokens_to_generate=0 implies logprobs should be True"),
    ({"prompts": ["a"], "logprobs": "yes"}, "logprobs must be a boolean value"),
    ({"prompts": ["a"], "temperature": 0}, "temperature must be a positive number less than or equal to 100.0"),
    ({"prompts": ["a"], "temperature": 101}, "temperature must be a positive number"),
    ({"prompts": ["a"], "top_k": 1001}, "top_k must be equal to or greater than 0"),
    ({"prompts": ["a"], "top_p": 1.5}, "top_p must be a positive float less than or equal to 1.0"),
    ({"prompts": ["a"], "top_k": 5, "top_p": 0.9}, "cannot set both top-k and top-p samplings."),
    ({"prompts": [""]}, "Empty prompts require add_BOS=true"),
    ({"prompts": ["a"], "add_BOS": 1}, "add_BOS must be a boolean value"),
    ({"prompts": ["a"], "random_seed": "x"}, "random_seed must be integer"),
    ({"prompts": ["a"], "beam_width": "2"}, "beam_width must be integer"),
    ({"prompts": ["a"], "beam_width": 0}, "beam_width must be an integer > 1"),
    ({"prompts": ["a", "b"], "beam_width": 2}, "When doing beam_search, batch size must be 1"),
    ({"prompts": ["a"], "beam_width": 2, "top_k": 1, "logprobs": True}, "beam search takes no logprobs, top_k"),
    ({"prompts": ["a"], "beam_width": 2, "stop_token": 10**6}, "stop_token 1000000 is not a token"),
    ({"prompts": ["a"], "beam_width": 2, "stop_token": "x"}, "stop_token must be an integer"),
    ({"prompts": ["a"], "beam_width": 2, "length_penalty": "1"}, "length_penalty must be a float"),
    ({"prompts": ["a"], "beam_width": 2, "length_penalty": 1e300}, "length_penalty must be between -10 and 10"),
    ({"prompts": ["a"], "tokens_to_generat": 5}, "unknown field(s): tokens_to_generat"),
    ({"prompts": ["word " * 150]}, "longer than the limit of 100"),
    ({"prompts": ["word " * 25], "tokens_to_generate": 200}, "needs more than the model's 256 positions"),
    ([1, 2], "must be a JSON object"),
]


@pytest.mark.parametrize("body,message", BAD_REQUESTS, ids=[m[:30] for _, m in BAD_REQUESTS])
def test_invalid_api_requests_get_400_with_a_clear_message(server, body, message):
    status, answer = server.request("PUT", "/api", body)
    assert status == 400 and message in answer["message"]


def test_malformed_http_gets_400_and_the_server_keeps_serving(server):
    assert server.request("PUT", "/api", raw=b'{"prompts": ["a"')[0] == 400
    assert "not valid JSON" in server.request("PUT", "/api", raw=b"\xff\xfe")[1]["message"]
    assert server.request("PUT", "/api", raw=b"x" * (2 << 20))[0] == 400
    assert server.request("GET", "/api")[0] == 404
    assert server.request("POST", "/nothing", {})[0] == 404
    status, health = server.request("GET", "/health")
    assert status == 200 and health["status"] == "ok" and health["iteration"] == 20
    assert server.request("PUT", "/api", {"prompts": ["a"], "tokens_to_generate": 2})[0] == 200


def test_openai_style_completions(server, gpt2):
    status, body = server.request("POST", "/v1/completions", {"prompt": "The old sailor", "max_tokens": 10, "temperature": 0,
                                                               "logprobs": 1})
    assert status == 200 and body["object"] == "text_completion"
    [g] = gpt2(["The old sailor"], tokens_to_generate=10, top_k=1)
    [choice] = body["choices"]
    generated = g.generated[:-1] if g.finish_reason == "eod" else g.generated
    assert choice["text"] == gpt2.tokenizer.decode(generated)
    assert choice["finish_reason"] == ("stop" if g.finish_reason == "eod" else "length")
    assert len(choice["logprobs"]["token_logprobs"]) == len(generated)
    n = g.prompt_length
    assert body["usage"] == {"prompt_tokens": n, "completion_tokens": len(g.generated), "total_tokens": n + len(g.generated)}
    stop = choice["text"].split()[1]
    status, body = server.request("POST", "/v1/completions", {"prompt": ["The old sailor"], "max_tokens": 10,
                                                               "temperature": 0, "stop": stop, "echo": True})
    assert body["choices"][0]["text"] == "The old sailor" + choice["text"][: choice["text"].find(stop)]
    assert body["choices"][0]["finish_reason"] == "stop"
    for bad in ({"max_tokens": 5}, {"prompt": "a", "n": 2}, {"prompt": "a", "stream": True}, {"prompt": "a", "temperature": 3},
                {"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}, {"prompt": "a", "logprobs": 9}):
        assert server.request("POST", "/v1/completions", bad)[0] == 400


@pytest.mark.slow
def test_fifty_concurrent_clients_each_get_their_own_answer(server, gpt2):
    """20 greedy requests with the same settings (batched together), 20 with their own token counts, and 10
    seeded sampling requests (each run alone): every answer is what the request gets on its own."""
    prompts = [f"{PROMPTS[i % 4]} {word}" for i, word in enumerate(["house", "river", "garden", "kitchen", "road"] * 10)]
    settings = ([{"tokens_to_generate": 8, "top_k": 1}] * 20 + [{"tokens_to_generate": 4 + i % 7, "top_k": 1} for i in range(20)]
                + [{"tokens_to_generate": 8, "top_p": 0.9, "random_seed": i} for i in range(10)])
    expected = []
    for prompt, kw in zip(prompts, settings):
        local = {"seed" if k == "random_seed" else k: v for k, v in kw.items()}
        expected.append(gpt2.tokenizer.decode(gpt2([prompt], **local)[0].tokens))
    batches_before = server.request("GET", "/health")[1]["batches"]

    def ask(i):
        return server.request("PUT", "/api", {"prompts": [prompts[i]], **settings[i]})

    with ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(ask, range(50)))
    for (status, body), text in zip(answers, expected):
        assert status == 200 and body["text"] == [text]
    health = server.request("GET", "/health")[1]
    assert health["status"] == "ok" and health["batches"] - batches_before < 50


def test_client_against_the_server_and_locally(server, gpt2_ckpt, gpt2):
    r = subprocess.run([sys.executable, "-m", "textmill.cli", "generate", "--url", server.url],
                       input="The old sailor\n6\nIn the garden\nmany\nA\n3\n\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("Response: ") == 2 and "whole number" in r.stdout
    assert "generate: 2 prompt(s) answered" in r.stdout
    [g] = gpt2(["The old sailor"], tokens_to_generate=8, top_k=1)
    remote = run_cli("generate", "--url", server.url, "--prompt", "The old sailor", "--tokens-to-generate", "8", "--greedy")
    local = run_cli("generate", "--load", str(gpt2_ckpt), "--prompt", "The old sailor", "--tokens-to-generate", "8", "--greedy")
    assert remote.returncode == local.returncode == 0
    assert remote.stdout.splitlines()[0] == local.stdout.splitlines()[0] == gpt2.tokenizer.decode(g.tokens).splitlines()[0]
    bad = run_cli("generate", "--url", server.url, "--prompt", "a", "--temperature", "0")
    assert bad.returncode == 2 and "HTTP 400: temperature must be a positive number" in bad.stderr
    # Beam search: the best sequences of each prompt, best first, the same through the server and locally.
    beams = [run_cli("generate", *source, "--prompt", "The old sailor", "--prompt", "A", "--tokens-to-generate", "6",
                     "--beam-width", "2") for source in (("--url", server.url), ("--load", str(gpt2_ckpt)))]
    assert beams[0].returncode == beams[1].returncode == 0, beams[0].stderr + beams[1].stderr
    assert beams[0].stdout.splitlines()[:-1] == beams[1].stdout.splitlines()[:-1]
    assert beams[0].stdout.count("  score: ") == 4 and "generate: 2 prompt(s) answered" in beams[0].stdout
    bad = run_cli("generate", "--load", str(gpt2_ckpt), "--prompt", "a", "--beam-width", "2", "--top-k", "5")
    assert bad.returncode == 2 and "--beam-width takes no --top-k" in bad.stderr
    bad = run_cli("generate", "--load", str(gpt2_ckpt), "--prompt", "a", "--length-penalty", "2")
    assert bad.returncode == 2 and "add --beam-width" in bad.stderr


def test_server_stops_cleanly_and_refuses_a_bad_checkpoint(gpt2_ckpt, tmp_path):
    s = Server(gpt2_ckpt)
    assert s.request("PUT", "/api", {"prompts": ["a"], "tokens_to_generate": 1})[0] == 200
    code, out, _ = s.stop()
    assert code == 0 and "serve: stopped after 1 request(s), 0 answered with an error" in out
    r = run_cli("serve", "--load", str(tmp_path))
    assert r.returncode == 2 and r.stderr.startswith("textmill: error:") and len(r.stderr.splitlines()) == 1
