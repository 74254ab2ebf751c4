"""The server's request parsing, in this process: each bad Megatron API request refused with its message."""

import pytest

from support.server import BAD_REQUESTS
from textmill.inference.requests import BadRequest, Limits, parse_api_request

# Refused by the server once it knows the model (its tokenizer and positions), not by the parser.
NEEDS_THE_MODEL = ("more than the limit", "is not a token", "longer than the limit", "needs more than the model's")
PARSED = [(body, message) for body, message in BAD_REQUESTS if not any(m in message for m in NEEDS_THE_MODEL)]


@pytest.mark.parametrize("body,message", PARSED, ids=[m[:30] for _, m in PARSED])
def test_the_parser_refuses_each_bad_request_with_megatrons_message(body, message):
    with pytest.raises(BadRequest) as refused:
        parse_api_request(body, Limits(max_prompts=8, max_prompt_tokens=100))
    assert message in str(refused.value)


def test_a_good_request_gives_megatrons_defaults():
    prompts, add_bos, params = parse_api_request({"prompts": ["The old sailor"], "tokens_to_generate": 12}, Limits())
    assert prompts == ["The old sailor"] and add_bos is False
    assert (params.tokens_to_generate, params.top_k, params.top_p, params.temperature) == (12, 0, 0.0, 1.0)
