"""`textmill serve`: a text generation server with Megatron-LM's REST API, and an OpenAI-style one.

    PUT  /api             Megatron's request ({"prompts": [...], "tokens_to_generate": 64, ...}) and response
                          ({"text": [...], "segments": [[...]], "logprobs": [[...]] | null}), field for field
    POST /v1/completions  OpenAI's completions request and response (prompt, max_tokens, temperature, top_p,
                          stop, logprobs, seed, echo); one choice per prompt
    GET  /health          {"status": "ok", ...} with the checkpoint and the request counts

One deliberate difference from Megatron: every invalid request is answered with HTTP 400 and
{"message": "..."} (Megatron answers some with HTTP 200 and a bare string). The messages are Megatron's
where Megatron has one. One worker thread generates; requests that wait while it works are batched together
when their settings are the same (greedy ones, or sampled ones without a seed: a seeded request runs
alone, so its answer never depends on what else arrived). The server binds 127.0.0.1 unless told
otherwise, and one failing request never takes the server down.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

from textmill.io.files import has_lone_surrogate

if TYPE_CHECKING:  # torch comes with generation, imported where a request or the model needs it
    from textmill.inference.generate import Generation, SamplingParams

MAX_BODY_BYTES = 1 << 20
MAX_DRAIN_BYTES = 64 << 20  # a larger body is not read at all: the connection is closed after the 400
MAX_SEED = 2**64 - 1  # the largest seed torch.Generator takes
# Below these, float32 logits and probabilities overflow or round to zero and sampling breaks down; such
# settings mean greedy decoding, which top_k=1 (or an OpenAI temperature of 0) asks for exactly.
MIN_TEMPERATURE = 1e-3
MIN_TOP_P = 1e-6


class BadRequest(ValueError):
    """An invalid request: answered with HTTP 400 and this message."""


@dataclass
class Limits:
    max_prompts: int = 128  # Megatron's limit
    max_prompt_tokens: int | None = None  # None: the model's positions
    max_tokens_to_generate: int | None = None  # None: the model's positions


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
              "random_seed", "no_log", "stop_token", "length_penalty"}


def parse_api_request(data, limits: Limits) -> tuple[list[str], bool, SamplingParams]:
    """Prompts, add_BOS and sampling settings of a Megatron `PUT /api` request, checked as Megatron checks
    them (same defaults and messages), plus the checks Megatron leaves to a crash or a hang."""
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    if "max_len" in data:
        raise BadRequest("max_len is no longer used.  Replace with tokens_to_generate")
    if "sentences" in data:
        raise BadRequest("sentences is no longer used.  Replace with prompts")
    if "beam_width" in data:
        raise BadRequest("Beam search is no longer supported.")
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
    top_p = check_sampling_value(data.get("top_p", 0.0), "top_p", 1.0, True, "top_p must be a positive float less than or equal to 1.0",
                        MIN_TOP_P)
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
    flags = {name: check_bool(data, name) for name in ("stop_on_double_eol", "stop_on_eol", "prevent_newline_after_colon", "no_log")}
    seed = check_seed(data.get("random_seed", -1), "random_seed", -1, "random_seed must be integer")
    # Beam-search settings: checked as Megatron checks them, and without effect (beam search is gone).
    if not is_int(data.get("stop_token", 0)):
        raise BadRequest("stop_token must be an integer")
    if not is_number(data.get("length_penalty", 1.0)):
        raise BadRequest("length_penalty must be a float")
    from textmill.inference.generate import SamplingParams

    params = SamplingParams(
        tokens_to_generate=n, temperature=temperature, top_k=top_k, top_p=top_p,
        top_p_decay=float(top_p_decay), top_p_bound=float(top_p_bound), seed=None if seed == -1 else seed,
        stop_on_eol=flags["stop_on_eol"], stop_on_double_eol=flags["stop_on_double_eol"],
        prevent_newline_after_colon=flags["prevent_newline_after_colon"], logprobs=logprobs)
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
    top_p = check_sampling_value(data.get("top_p", 1.0), "top_p", 1.0, False, "top_p must be a number greater than 0 and at most 1",
                        MIN_TOP_P)
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


class TextGenerator:
    """A loaded checkpoint and its tokenizer, generating for one request at a time."""

    def __init__(self, load: Path, limits: Limits, device: str = "cpu", bf16: bool = False,
                 vocab_file=None, merge_file=None):
        from textmill.trainer.checkpoint import checkpoint_tokenizer, load_model

        self.model, ckpt = load_model(Path(load), device)
        self.tokenizer = checkpoint_tokenizer(Path(load), ckpt.meta, vocab_file, merge_file)
        import torch

        from textmill.inference.generate import TokenText

        self.text = TokenText(self.tokenizer)
        self.dtype = torch.bfloat16 if bf16 else None
        self.limits = limits
        self.positions = self.model.config.max_position_embeddings
        self.info = {"checkpoint": str(load), "iteration": "release" if ckpt.release else ckpt.meta["iteration"],
                     "parameters": self.model.num_parameters(), "positions": self.positions,
                     "vocab_size": self.tokenizer.vocab_size}

    def tokenize(self, prompts: list[str], add_bos: bool, params: SamplingParams) -> list[list[int]]:
        ids = [([self.tokenizer.eod] if add_bos else []) + self.tokenizer.encode(p) for p in prompts]
        if any(not p for p in ids):
            raise BadRequest("an empty prompt needs add_BOS=true (there is nothing to continue)")
        longest = max(len(p) for p in ids)
        prompt_limit = min(self.limits.max_prompt_tokens or self.positions, self.positions)
        if longest > prompt_limit:
            raise BadRequest(f"a prompt of {longest} tokens is longer than the limit of {prompt_limit}")
        generate_limit = min(self.limits.max_tokens_to_generate or self.positions, self.positions)
        if params.tokens_to_generate > generate_limit:
            raise BadRequest(f"tokens_to_generate={params.tokens_to_generate} is more than the limit of {generate_limit}")
        if longest + params.tokens_to_generate > self.positions:
            raise BadRequest(f"a prompt of {longest} tokens plus tokens_to_generate={params.tokens_to_generate} "
                             f"needs more than the model's {self.positions} positions")
        return ids

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        from textmill.inference.generate import generate

        return generate(self.model, self.text, prompts, params, self.tokenizer.eod, self.dtype)

    def api_response(self, generations: list[Generation], logprobs: bool) -> dict:
        """Megatron's response: prompt + generation as text, each token on its own, log-probabilities."""
        return {
            "text": [self.tokenizer.decode(g.tokens) for g in generations],
            "segments": [[self.text.segment(t) for t in g.tokens] for g in generations],
            "logprobs": [g.logprobs for g in generations] if logprobs else None,
        }

    def completion_response(self, generations: list[Generation], echo: bool, logprobs: bool, number: int) -> dict:
        choices, prompt_tokens, completion_tokens = [], 0, 0
        for i, g in enumerate(generations):
            generated = g.generated[:-1] if g.finish_reason == "eod" else g.generated
            text = self.tokenizer.decode(generated)
            if g.stop_at is not None:
                text = text[: g.stop_at]
            shown = (g.tokens[: g.prompt_length] if echo else []) + generated
            choice = {"text": (self.tokenizer.decode(g.tokens[: g.prompt_length]) if echo else "") + text,
                      "index": i, "logprobs": None,
                      "finish_reason": "length" if g.finish_reason == "length" else "stop"}
            if logprobs:
                values = [None] + g.logprobs  # the first token has no log-probability
                first = 0 if echo else g.prompt_length
                pieces = [self.text.segment(t) for t in shown]
                offsets = [sum(len(p) for p in pieces[:j]) for j in range(len(pieces))]
                choice["logprobs"] = {"tokens": pieces, "token_logprobs": values[first : first + len(shown)],
                                      "top_logprobs": None, "text_offset": offsets}
            choices.append(choice)
            prompt_tokens += g.prompt_length
            completion_tokens += len(g.generated)
        return {"id": f"cmpl-{number}", "object": "text_completion", "created": int(time.time()),
                "model": self.info["checkpoint"], "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}


class Batcher:
    """Generation on one worker thread. Requests queue up while it works; it then takes the oldest and every
    waiting request with the same settings (up to max_prompts prompts) as one batch."""

    def __init__(self, generator: TextGenerator):
        self.generator = generator
        self.pending: list[tuple[list[list[int]], SamplingParams, Future]] = []
        self.ready = threading.Condition()
        self.batches = 0
        threading.Thread(target=self.work, daemon=True, name="generation").start()

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        future = Future()
        with self.ready:
            self.pending.append((prompts, params, future))
            self.ready.notify()
        return future.result()

    def next_batch(self) -> list[tuple[list[list[int]], SamplingParams, Future]]:
        with self.ready:
            while not self.pending:
                self.ready.wait()
            first = self.pending.pop(0)
            batch, rest, count = [first], [], len(first[0])
            # A seeded sampling request draws from its own generator; in a batch its draws would depend
            # on the other rows, so it goes alone.
            shareable = first[1].greedy or first[1].seed is None
            for item in self.pending:
                if shareable and item[1] == first[1] and count + len(item[0]) <= self.generator.limits.max_prompts:
                    batch.append(item)
                    count += len(item[0])
                else:
                    rest.append(item)
            self.pending = rest
            return batch

    def work(self) -> None:
        while True:
            batch = self.next_batch()
            try:
                out = self.generator([p for prompts, _, _ in batch for p in prompts], batch[0][1])
            except Exception as exc:  # reported to each waiting request as a 500
                for _, _, future in batch:
                    future.set_exception(exc)
                continue
            self.batches += 1
            for prompts, _, future in batch:
                future.set_result(out[: len(prompts)])
                out = out[len(prompts) :]


def refuse_constant(name: str):
    """NaN, Infinity and -Infinity: Python's JSON reader accepts them, JSON does not."""
    raise BadRequest(f"the request body holds {name}, which is not a JSON number")


class Handler(BaseHTTPRequestHandler):
    server_version = "textmill"
    protocol_version = "HTTP/1.1"
    timeout = 60  # a client that stops sending mid-request cannot hold a thread forever

    def send_json(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_json(self):
        length = self.headers.get("Content-Length")
        if length is None or not (length.isascii() and length.isdigit()):
            raise BadRequest("a Content-Length header of ASCII digits is required")
        if int(length) > MAX_BODY_BYTES:
            # Read what a reasonable client sends before answering, so it sees the 400 and not a broken pipe.
            left = int(length) if int(length) <= MAX_DRAIN_BYTES else 0
            while left > 0:
                left -= len(self.rfile.read(min(left, 1 << 16))) or left
            raise BadRequest(f"the request body is larger than {MAX_BODY_BYTES} bytes")
        body = self.rfile.read(int(length))
        try:
            data = json.loads(body, parse_constant=refuse_constant)
        except RecursionError:
            raise BadRequest("the request body is nested too deeply") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"the request body is not valid JSON ({exc})") from None
        if has_lone_surrogate(data):
            raise BadRequest("the request holds a lone surrogate escape (\\ud800-\\udfff), which is not text")
        return data

    def answer(self, work) -> None:
        stats = self.server.stats
        started = time.perf_counter()
        try:
            status, body = HTTPStatus.OK, work()
        except BadRequest as exc:
            status, body = HTTPStatus.BAD_REQUEST, {"message": str(exc)}
        except Exception as exc:  # a bug or an out-of-memory: report it, keep serving
            status, body = HTTPStatus.INTERNAL_SERVER_ERROR, {"message": f"generation failed: {type(exc).__name__}: {exc}"}
            print(f"textmill serve: {self.command} {self.path} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        with self.server.stats_lock:
            stats["requests"] += 1
            stats["errors"] += status != HTTPStatus.OK
        if status != HTTPStatus.OK:  # the body may be unread; do not reuse the connection
            self.close_connection = True
        self.send_json(status, body)
        if self.server.verbose:
            print(f"{self.command} {self.path} {int(status)} {time.perf_counter() - started:.3f}s", file=sys.stderr)

    def do_PUT(self):
        if self.path != "/api":
            return self.not_found()
        generator: TextGenerator = self.server.generator

        def work():
            prompts, add_bos, params = parse_api_request(self.read_json(), generator.limits)
            generations = self.server.batcher(generator.tokenize(prompts, add_bos, params), params)
            return generator.api_response(generations, params.logprobs)

        self.answer(work)

    def do_POST(self):
        if self.path != "/v1/completions":
            return self.not_found()
        generator: TextGenerator = self.server.generator

        def work():
            prompts, echo, logprobs, params = parse_completion_request(self.read_json(), generator.limits)
            ids = generator.tokenize(prompts, False, params)
            with self.server.stats_lock:
                self.server.stats["completions"] += 1
                number = self.server.stats["completions"]
            return generator.completion_response(self.server.batcher(ids, params), echo, logprobs, number)

        self.answer(work)

    def do_GET(self):
        if self.path != "/health":
            return self.not_found()
        with self.server.stats_lock:
            stats = dict(self.server.stats)
        stats["batches"] = self.server.batcher.batches
        self.send_json(HTTPStatus.OK, {"status": "ok", **self.server.generator.info, **stats})

    def not_found(self):
        self.close_connection = True
        self.send_json(HTTPStatus.NOT_FOUND, {"message": f"no endpoint {self.command} {self.path}; "
                                                          "use PUT /api, POST /v1/completions or GET /health"})

    def log_message(self, format, *args):  # one line per request comes from answer() when verbose
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the listen backlog: socketserver's 5 resets connections when many clients arrive at once


def make_server(generator: TextGenerator, host: str = "127.0.0.1", port: int = 5000, verbose: bool = False) -> Server:
    server = Server((host, port), Handler)
    server.generator = generator
    server.batcher = Batcher(generator)
    server.verbose = verbose
    server.stats = {"requests": 0, "errors": 0, "completions": 0}
    server.stats_lock = threading.Lock()
    return server



def serve_until_stopped(server: Server) -> float:
    """Serve on a background thread until SIGINT or SIGTERM, then stop taking connections and close; the
    seconds served."""
    import signal

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    started = time.perf_counter()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stop.wait()
    server.shutdown()
    server.server_close()
    return time.perf_counter() - started
