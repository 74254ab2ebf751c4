"""`textmill serve`, a process of its own: Megatron's API and its answers, bad requests, many clients, clients that
hang up, the client, and greedy generation against transformers on the export."""

import json
import socket
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from support.cli import run_cli
from support.generation import PROMPTS
from support.server import BAD_REQUESTS, Server
from textmill.inference.generate import SamplingParams


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
        assert max(abs(a - b) for a, b in zip(body["logprobs"][i], g.logprobs, strict=True)) < 1e-4
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
    assert max(abs(a - h.score) for a, h in zip(body["scores"], local, strict=True)) < 1e-4
    # A stop token of the caller's choice ends a sequence there.
    space = gpt2.tokenizer.encode(" the")[0]
    status, body = server.request("PUT", "/api", {"prompts": ["The old sailor"], "tokens_to_generate": 12, "beam_width": 2,
                                                  "stop_token": space})
    assert status == 200 and all(s[-1] == " the" or len(s) == len(ids) + 12 for s in body["segments"])


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


def test_fifty_concurrent_clients_each_get_their_own_answer(server, gpt2):
    """20 greedy requests with the same settings (batched together), 20 with their own token counts, and 10
    seeded sampling requests (each run alone): every answer is what the request gets on its own."""
    prompts = [f"{PROMPTS[i % 4]} {word}" for i, word in enumerate(["house", "river", "garden", "kitchen", "road"] * 10)]
    settings = ([{"tokens_to_generate": 8, "top_k": 1}] * 20 + [{"tokens_to_generate": 4 + i % 7, "top_k": 1} for i in range(20)]
                + [{"tokens_to_generate": 8, "top_p": 0.9, "random_seed": i} for i in range(10)])
    expected = []
    for prompt, kw in zip(prompts, settings, strict=True):
        local = {"seed" if k == "random_seed" else k: v for k, v in kw.items()}
        expected.append(gpt2.tokenizer.decode(gpt2([prompt], **local)[0].tokens))
    batches_before = server.request("GET", "/health")[1]["batches"]

    def ask(i):
        return server.request("PUT", "/api", {"prompts": [prompts[i]], **settings[i]})

    with ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(ask, range(50)))
    for (status, body), text in zip(answers, expected, strict=True):
        assert status == 200 and body["text"] == [text]
    health = server.request("GET", "/health")[1]
    assert health["status"] == "ok" and health["batches"] - batches_before < 50


def test_sixty_heavy_requests_whose_clients_hung_up_leave_the_server_free(server):
    """The adversarial pass's case: 60 heavy requests sent at once, their clients gone before any answer; the
    server stops or drops each (it ran all 60 before, and an ordinary request got no answer in 600 s)."""
    heavy = json.dumps({"prompts": [f"{p} again" for p in PROMPTS * 2], "tokens_to_generate": 150, "top_k": 1}).encode()
    before = server.request("GET", "/health")[1]
    host, port = server.url.removeprefix("http://").split(":")
    sockets = [socket.create_connection((host, int(port))) for _ in range(60)]
    for sock in sockets:
        sock.sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(heavy), heavy))
    for sock in sockets:
        sock.close()
    status, body = server.request("PUT", "/api", {"prompts": ["The old sailor"], "tokens_to_generate": 8, "top_k": 1})
    assert status == 200 and body["text"][0].startswith("The old sailor")
    after = server.request("GET", "/health")[1]
    assert after["requests"] - before["requests"] == 61 and after["errors"] == before["errors"]
    # Each heavy request (8 prompts: a batch of its own) was dropped from the queue or stopped (abandoned), or
    # finished before its client was seen gone; the ordinary request's batch is the one more.
    heavy_finished = after["batches"] - before["batches"] - 1
    abandoned = after["abandoned"] - before["abandoned"]
    print(f"heavy requests finished {heavy_finished}, abandoned {abandoned}, stopped batches {after['stopped_batches']}")
    assert heavy_finished < 60 and abandoned + heavy_finished >= 60 and after["waiting"] == 0


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
