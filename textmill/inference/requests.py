"""The server's requests, read and checked: Megatron's PUT /api and OpenAI's POST /v1/completions bodies
become prompts and sampling settings, or a BadRequest whose message is Megatron's where Megatron has one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch comes with generation, imported where a request needs it
    from textmill.inference.generate import SamplingParams

MAX_SEED = 2**64 - 1  # the largest seed torch.Generator takes
# Below these, float32 logits and probabilities overflow or round to zero and sampling breaks down; such
# settings mean greedy decoding, which top_k=1 (or an OpenAI temperature of 0) asks for exactly.
MIN_TEMPERATURE = 1e-3
MIN_TOP_P = 1e-6
MAX_LENGTH_PENALTY = 10


class BadRequest(ValueError):
    """An invalid request: answered with HTTP 400 and this message."""


@dataclass
class Limits:
    max_prompts: int = 128  # Megatron's limit
    max_prompt_tokens: int | None = None  # None: the model's positions
    max_tokens_to_generate: int | None = None  # None: the model's positions
    max_beam_width: int = 16  # beams x vocabulary logits a step, and a key/value cache per beam
    max_waiting: int = 64  # requests queued behind the batch being generated; one more is answered 503
    max_connections: int = 256  # connections open at once, each a thread; one more is answered 503


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_sampling_value(value, name: str, high: float, zero_ok: bool, message: str, smallest: float) -> float:
    """A temperature or top_p: a number in [0, high] (0 only where it means something), and 0 or at least
    `smallest`."""
    if not is_number(value) or not 0.0 <= value <= high or (value == 0.0 and not zero_ok):
        raise BadRequest(message)
    if 0.0 < value < smallest:
        raise BadRequest(f"{name} must be at least {smallest} (for greedy decoding ask for top_k=1)")
    return float(value)


def check_seed(value, name: str, low: int, message: str) -> int:
    if not is_int(value):
        raise BadRequest(message)
    if not low <= value <= MAX_SEED:
        raise BadRequest(f"{name} must be between {low} and {MAX_SEED}")
    return value


def check_bool(data: dict, name: str, default: bool = False) -> bool:
    value = data.get(name, default)
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be a boolean value")
    return value


API_FIELDS = {"prompts", "tokens_to_generate", "logprobs", "temperature", "top_k", "top_p", "top_p_decay",
              "top_p_bound", "add_BOS", "stop_on_double_eol", "stop_on_eol", "prevent_newline_after_colon",
              "random_seed", "no_log", "beam_width", "stop_token", "length_penalty"}
# What beam search leaves out: it is deterministic, scores whole sequences and ends them at stop_token.
NOT_WITH_BEAM_SEARCH = {"logprobs": False, "temperature": 1.0, "top_k": 0, "top_p": 0.0, "top_p_decay": 0.0,
                        "top_p_bound": 0.0, "random_seed": -1, "stop_on_eol": False, "stop_on_double_eol": False}


def parse_api_request(data, limits: Limits) -> tuple[list[str], bool, SamplingParams]:
    """Prompts, add_BOS and sampling settings of a Megatron `PUT /api` request, checked as Megatron checks
    them (same defaults and messages), plus the checks Megatron leaves to a crash or a hang."""
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    if "max_len" in data:
        raise BadRequest("max_len is no longer used.  Replace with tokens_to_generate")
    if "sentences" in data:
        raise BadRequest("sentences is no longer used.  Replace with prompts")
    if "prompts" not in data:
        raise BadRequest("prompts argument required")
    unknown = sorted(set(data) - API_FIELDS)
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)}")
    prompts = data["prompts"]
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise BadRequest("prompts is not a list of strings")
    if not prompts:
        raise BadRequest("prompts is empty")
    if len(prompts) > limits.max_prompts:
        raise BadRequest(f"Maximum number of prompts is {limits.max_prompts}")
    n = data.get("tokens_to_generate", 64)
    if not is_int(n):
        raise BadRequest("tokens_to_generate must be an integer greater than 0")
    if n < 0:
        raise BadRequest("tokens_to_generate must be an integer greater than or equal to 0")
    logprobs = check_bool(data, "logprobs")
    if n == 0 and not logprobs:
        raise BadRequest("tokens_to_generate=0 implies logprobs should be True")
    temperature = check_sampling_value(data.get("temperature", 1.0), "temperature", 100.0, False,
                              "temperature must be a positive number less than or equal to 100.0", MIN_TEMPERATURE)
    top_k = data.get("top_k", 0)
    if not is_int(top_k) or not 0 <= top_k <= 1000:
        raise BadRequest("top_k must be equal to or greater than 0 and less than or equal to 1000")
    top_p = check_sampling_value(data.get("top_p", 0.0), "top_p", 1.0, True,
                                 "top_p must be a positive float less than or equal to 1.0", MIN_TOP_P)
    if top_k > 0 and top_p > 0.0:
        raise BadRequest("cannot set both top-k and top-p samplings.")
    top_p_decay = data.get("top_p_decay", 0.0)
    if not is_number(top_p_decay) or not 0.0 <= top_p_decay <= 1.0:
        raise BadRequest("top_p_decay must be a positive float less than or equal to 1.0")
    if top_p_decay > 0.0 and top_p == 0.0:
        raise BadRequest("top_p_decay cannot be set without top_p")
    top_p_bound = data.get("top_p_bound", 0.0)
    if not is_number(top_p_bound) or not 0.0 <= top_p_bound <= top_p:
        raise BadRequest("top_p_bound must be a positive float less than or equal to top_p")
    add_bos = check_bool(data, "add_BOS")
    if any(not p for p in prompts) and not add_bos:
        raise BadRequest("Empty prompts require add_BOS=true")
    flags = {name: check_bool(data, name)
             for name in ("stop_on_double_eol", "stop_on_eol", "prevent_newline_after_colon", "no_log")}
    seed = check_seed(data.get("random_seed", -1), "random_seed", -1, "random_seed must be integer")
    # Beam search, checked as Megatron checks it. Without beam_width, stop_token and length_penalty are
    # checked and have no effect, as in Megatron.
    beam_width = data.get("beam_width", 0)
    if "beam_width" in data:
        if not is_int(beam_width):
            raise BadRequest("beam_width must be integer")
        if beam_width < 1:
            raise BadRequest("beam_width must be an integer > 1")
        if beam_width > limits.max_beam_width:
            raise BadRequest(f"beam_width must be at most {limits.max_beam_width} (the server's --max-beam-width)")
        if len(prompts) > 1:
            raise BadRequest("When doing beam_search, batch size must be 1")
        given = [name for name, default in NOT_WITH_BEAM_SEARCH.items() if data.get(name, default) != default]
        if given:
            raise BadRequest(f"beam search takes no {', '.join(given)} (it is deterministic, returns a score per "
                             "sequence and ends a sequence at stop_token)")
    stop_token = data.get("stop_token")
    if "stop_token" in data and (not is_int(stop_token) or stop_token < 0):
        raise BadRequest("stop_token must be an integer")
    length_penalty = data.get("length_penalty", 1.0)
    if not is_number(length_penalty):
        raise BadRequest("length_penalty must be a float")
    if abs(length_penalty) > MAX_LENGTH_PENALTY:  # beyond it, length ** penalty leaves float range
        raise BadRequest(f"length_penalty must be between -{MAX_LENGTH_PENALTY} and {MAX_LENGTH_PENALTY}")
    from textmill.inference.generate import SamplingParams

    params = SamplingParams(
        tokens_to_generate=n, temperature=temperature, top_k=top_k, top_p=top_p,
        top_p_decay=float(top_p_decay), top_p_bound=float(top_p_bound), seed=None if seed == -1 else seed,
        stop_on_eol=flags["stop_on_eol"], stop_on_double_eol=flags["stop_on_double_eol"],
        prevent_newline_after_colon=flags["prevent_newline_after_colon"], logprobs=logprobs,
        beam_width=beam_width, stop_token=stop_token, length_penalty=float(length_penalty))
    return prompts, add_bos, params


COMPLETION_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "stop", "logprobs",
                     "seed", "echo", "stream", "user"}


def parse_completion_request(data, limits: Limits) -> tuple[list[str], bool, bool, SamplingParams]:
    """Prompts, echo, logprobs wanted and sampling settings of an OpenAI-style completions request."""
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    unknown = sorted(set(data) - COMPLETION_FIELDS)
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)}")
    if "prompt" not in data:
        raise BadRequest("prompt is required")
    prompts = data["prompt"]
    prompts = [prompts] if isinstance(prompts, str) else prompts
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise BadRequest("prompt must be a string or a non-empty list of strings")
    if len(prompts) > limits.max_prompts:
        raise BadRequest(f"Maximum number of prompts is {limits.max_prompts}")
    n = data.get("max_tokens", 16)
    if not is_int(n) or n < 0:
        raise BadRequest("max_tokens must be an integer greater than or equal to 0")
    temperature = check_sampling_value(data.get("temperature", 1.0), "temperature", 2.0, True,
                              "temperature must be a number between 0 and 2", MIN_TEMPERATURE)
    top_p = check_sampling_value(data.get("top_p", 1.0), "top_p", 1.0, False,
                                 "top_p must be a number greater than 0 and at most 1", MIN_TOP_P)
    top_k = data.get("top_k", 0)
    if not is_int(top_k) or not 0 <= top_k <= 1000:
        raise BadRequest("top_k must be an integer between 0 and 1000")
    if top_k > 0 and top_p < 1.0:
        raise BadRequest("cannot set both top_k and top_p")
    if data.get("n", 1) != 1:
        raise BadRequest("n must be 1 (send several prompts instead)")
    if data.get("stream", False) is not False:
        raise BadRequest("stream is not supported")
    stop = data.get("stop")
    stop = [stop] if isinstance(stop, str) else (stop or [])
    if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest("stop must be a non-empty string or a list of up to 4 of them")
    logprobs = data.get("logprobs")
    if logprobs is not None and (not is_int(logprobs) or not 0 <= logprobs <= 5):
        raise BadRequest("logprobs must be null or an integer between 0 and 5")
    seed = data.get("seed")
    if seed is not None:
        check_seed(seed, "seed", 0, "seed must be a non-negative integer")
    echo = check_bool(data, "echo")
    if n == 0 and not echo:
        raise BadRequest("max_tokens=0 needs echo=true")
    from textmill.inference.generate import SamplingParams

    params = SamplingParams(
        tokens_to_generate=n, temperature=temperature or 1.0, top_k=1 if temperature == 0 else top_k,
        top_p=0.0 if top_p == 1.0 else top_p, seed=seed, stop=tuple(stop), logprobs=logprobs is not None)
    return prompts, echo, logprobs is not None, params


def refuse_constant(name: str):
    """NaN, Infinity and -Infinity: Python's JSON reader accepts them, JSON does not."""
    raise BadRequest(f"the request body holds {name}, which is not a JSON number")
