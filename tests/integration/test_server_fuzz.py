"""The server answers every request it is sent with 200 or a 400 that says what is wrong; 500 is for real
internal faults only. Generated requests across both schemas go to a real `textmill serve` process."""

import http.client
import json
import socket
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.server import Server
from textmill.inference.requests import API_FIELDS, COMPLETION_FIELDS

# Values chosen to break parsers and samplers: huge and negative integers, denormal, infinite and NaN floats,
# lone surrogates, wrong types and nesting.
AWKWARD_NUMBERS = st.sampled_from([0, 1, -1, 2, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -2**64, 10**30,
                                   1e-300, 5e-324, 1e-7, -0.0, 0.5, 1.0, 1e300, float("inf"), float("-inf"), float("nan")])


def mostly(plausible, awkward, one_in: int = 4):
    """`plausible`, except one draw in `one_in` that is `awkward`."""
    return st.integers(1, one_in).flatmap(lambda i: awkward if i == 1 else plausible)


TEXTS = mostly(st.text(min_size=1, max_size=12), st.sampled_from(["\ud800", "a\udfffb", "\x00", "\n\n", "", " :"]), 12)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), AWKWARD_NUMBERS, st.floats(), TEXTS)


VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXTS, inner, max_size=2),
                      max_leaves=6)


# Mostly plausible values, so that requests get past the first check and reach the sampler; one in four
# fields gets an awkward value instead.
PLAUSIBLE = {
    "tokens_to_generate": st.integers(0, 6), "max_tokens": st.integers(0, 6), "logprobs": st.booleans() | st.integers(0, 5),
    "temperature": st.floats(0, 2) | AWKWARD_NUMBERS, "top_k": st.integers(0, 5), "top_p": st.floats(0, 1) | AWKWARD_NUMBERS,
    "top_p_decay": st.floats(0, 1), "top_p_bound": st.floats(0, 1), "random_seed": st.integers(-2, 2**64 + 2),
    "seed": st.integers(-2, 2**64 + 2), "stop": TEXTS | st.lists(TEXTS, max_size=4), "echo": st.booleans(),
    "add_BOS": st.booleans(), "stop_on_eol": st.booleans(), "n": st.just(1), "stop_token": st.integers(0, 50256),
    "length_penalty": st.floats(0, 2) | AWKWARD_NUMBERS, "beam_width": st.integers(0, 4), "model": TEXTS, "user": TEXTS,
    "prompts": st.lists(TEXTS, min_size=1, max_size=3),
    "prompt": TEXTS | st.lists(TEXTS, min_size=1, max_size=3),
}


def field(name: str):
    return mostly(PLAUSIBLE.get(name, st.booleans()), VALUES, 15)


def requests(required: tuple[str, str], fields: set[str]):
    """Request bodies with the prompt and token-count fields (the default count is slow to generate) and any
    of the others; now and then not an object at all."""
    optional = {name: field(name) for name in sorted(fields - set(required))}
    return mostly(st.fixed_dictionaries({name: field(name) for name in required}, optional=optional), VALUES, 10)


FUZZ = settings(max_examples=550, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def served(gpt2_ckpt):
    s = Server(gpt2_ckpt, "--max-prompts", "4", "--max-prompt-tokens", "40", "--max-tokens-to-generate", "8")
    yield s
    if s.proc.poll() is None:
        s.stop()


def send(served, method: str, path: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    """One request over a fresh connection, header values sent as UTF-8 bytes whatever they hold."""
    host, port = served.url.removeprefix("http://").split(":")
    fields = {"Host": host, "Content-Length": str(len(body)), "Connection": "close"} | (headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head.encode("latin-1" if head.isascii() or max(map(ord, head)) < 256 else "utf-8") + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, json.loads(response.read())


def encode(body) -> bytes:
    return json.dumps(body).encode()  # NaN and Infinity come out as JSON's common extension; surrogates as \\ud800


STATUSES = Counter()  # what the fuzzing got, per endpoint and status


def assert_answered(served, status, answer, body):
    STATUSES[status] += 1
    assert status in (200, 400), (status, answer, body)
    assert status == 200 or answer["message"], body
    assert served.proc.poll() is None


@FUZZ
@given(body=requests(("prompts", "tokens_to_generate"), API_FIELDS))
def test_generated_api_requests_get_200_or_400(served, body):
    status, answer = send(served, "PUT", "/api", encode(body))
    assert_answered(served, status, answer, body)


@FUZZ
@given(body=requests(("prompt", "max_tokens"), COMPLETION_FIELDS))
def test_generated_completion_requests_get_200_or_400(served, body):
    status, answer = send(served, "POST", "/v1/completions", encode(body))
    assert_answered(served, status, answer, body)


NAMED_CASES = [
    ("deep nesting", "PUT", "/api", b"[" * 100_000 + b"]" * 100_000, {}, "nested"),
    ("deep object", "POST", "/v1/completions", b'{"prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", {}, "nested"),
    ("seed 2^64", "PUT", "/api", b'{"prompts": ["a"], "tokens_to_generate": 2, "random_seed": 18446744073709551616}', {},
     "random_seed"),
    ("openai seed 2^64", "POST", "/v1/completions", b'{"prompt": "a", "max_tokens": 2, "seed": 18446744073709551616}', {},
     "seed"),
    ("surrogate prompt", "PUT", "/api", b'{"prompts": ["a \\ud800"], "tokens_to_generate": 2}', {}, "surrogate"),
    ("surrogate stop", "POST", "/v1/completions", b'{"prompt": "a", "max_tokens": 2, "stop": "\\udc00"}', {}, "surrogate"),
    ("full-width length", "PUT", "/api", b'{"prompts": ["a"]}', {"Content-Length": "\uff11\uff18"}, "Content-Length"),
    ("superscript length", "PUT", "/api", b'{"prompts": ["a"]}', {"Content-Length": "\u00b2"}, "Content-Length"),
    ("Arabic-Indic length", "PUT", "/api", b'{"prompts": ["a"]}', {"Content-Length": "\u0661\u0668"}, "Content-Length"),
    ("a length of 5,000 digits", "PUT", "/api", b'{"prompts": ["a"]}', {"Content-Length": "9" * 5000}, "Content-Length"),
    ("tiny temperature", "PUT", "/api", b'{"prompts": ["a"], "tokens_to_generate": 2, "temperature": 1e-300}', {},
     "temperature"),
    ("tiny top_p", "PUT", "/api", b'{"prompts": ["a"], "tokens_to_generate": 2, "top_p": 1e-300}', {}, "top_p"),
    ("openai tiny top_p", "POST", "/v1/completions", b'{"prompt": "a", "max_tokens": 2, "top_p": 1e-300}', {}, "top_p"),
    ("NaN temperature", "PUT", "/api", b'{"prompts": ["a"], "temperature": NaN}', {}, "NaN"),
    ("Infinity top_p", "POST", "/v1/completions", b'{"prompt": "a", "top_p": Infinity}', {}, "Infinity"),
]


@pytest.mark.parametrize("name,method,path,body,headers,word", NAMED_CASES, ids=[c[0] for c in NAMED_CASES])
def test_each_reported_500_is_now_a_400(served, name, method, path, body, headers, word):
    status, answer = send(served, method, path, body, headers)
    assert status == 400 and word in answer["message"], answer


def test_the_server_is_up_and_answers_after_the_fuzzing(served):
    status, health = send(served, "GET", "/health", b"")
    assert status == 200 and health["status"] == "ok"
    if sum(STATUSES.values()) >= 1000:  # after the fuzzing (this test runs last): it reached the sampler often
        assert STATUSES[200] >= 100, STATUSES
    status, answer = send(served, "PUT", "/api", encode({"prompts": ["The old sailor"], "tokens_to_generate": 3, "top_k": 1}))
    assert status == 200 and answer["text"][0].startswith("The old sailor")
