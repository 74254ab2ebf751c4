"""`textmill serve`: a text generation server with Megatron-LM's REST API, and an OpenAI-style one.

    PUT  /api             Megatron's request ({"prompts": [...], "tokens_to_generate": 64, ...}) and response
                          ({"text": [...], "segments": [[...]], "logprobs": [[...]] | null}), field for field;
                          with "beam_width": W (one prompt), beam search as Megatron's server at docs/fidelity.md's
                          commit does it: the W best sequences, best first, and {"scores": [...]} beside them
    POST /v1/completions  OpenAI's completions request and response (prompt, max_tokens, temperature, top_p,
                          stop, logprobs, seed, echo); one choice per prompt
    GET  /health          {"status": "ok", ...} with the checkpoint and the request counts

One deliberate difference from Megatron: every invalid request is answered with HTTP 400 and
{"message": "..."} (Megatron answers some with HTTP 200 and a bare string). The messages are Megatron's
where Megatron has one. A beam search hypothesis ends at its stop token (Megatron pads every hypothesis to
the full length with end-of-document tokens), and beam search refuses the sampling settings it would
ignore. One worker thread generates; requests that wait while it works are batched together
when their settings are the same (greedy ones, or sampled ones without a seed: a seeded request runs
alone, so its answer never depends on what else arrived). At most --max-waiting requests wait behind the
batch being generated; one more is answered 503 with a Retry-After header (the seconds the last batch
took). A request whose client hangs up is dropped from the queue, and a batch whose clients have all gone
stops before its next token. The server binds 127.0.0.1 unless told otherwise, and one failing request
never takes the server down.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from textmill.inference.batcher import Batcher, Busy, ClientGone
from textmill.inference.requests import BadRequest, Limits, parse_api_request, parse_completion_request, refuse_constant
from textmill.io.files import has_lone_surrogate
from textmill.io.numbers import whole_number

MAX_BODY_BYTES = 1 << 20
MAX_DRAIN_BYTES = 64 << 20  # a larger body is not read at all: the connection is closed after the 400

if TYPE_CHECKING:  # torch comes with generation, imported where a request or the model needs it
    from textmill.inference.generate import Generation, SamplingParams


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
        if params.stop_token is not None and params.stop_token >= self.tokenizer.vocab_size:
            raise BadRequest(f"stop_token {params.stop_token} is not a token: the vocabulary has {self.tokenizer.vocab_size}")
        return ids

    def __call__(self, prompts: list[list[int]], params: SamplingParams,
                 stopped: Callable[[], bool] | None = None) -> list[Generation] | list[list[Generation]]:
        """A generation per prompt; with beam search, the hypotheses of each prompt, best first. `stopped`
        is asked before each token (generation ends with Cancelled when it says so)."""
        from textmill.inference.beam import beam_search
        from textmill.inference.generate import generate

        if params.beam_width:
            stop = self.tokenizer.eod if params.stop_token is None else params.stop_token
            return [beam_search(self.model, p, params, self.tokenizer.vocab_size, stop, self.text, self.dtype, stopped)
                    for p in prompts]
        return generate(self.model, self.text, prompts, params, self.tokenizer.eod, self.dtype, stopped)

    def api_response(self, generations: list[Generation], logprobs: bool) -> dict:
        """Megatron's response: prompt + generation as text, each token on its own, log-probabilities."""
        return {
            "text": [self.tokenizer.decode(g.tokens) for g in generations],
            "segments": [[self.text.segment(t) for t in g.tokens] for g in generations],
            "logprobs": [g.logprobs for g in generations] if logprobs else None,
        }

    def beam_response(self, hypotheses: list[Generation]) -> dict:
        """Megatron's beam search response: each hypothesis as text and tokens, and its score."""
        answer = self.api_response(hypotheses, False)
        return {"text": answer["text"], "segments": answer["segments"], "scores": [h.score for h in hypotheses]}

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


# The poll events of a client that has closed: its end of stream (even with data unread), a hangup, an error.
_HANGUP = (select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL) if hasattr(select, "POLLRDHUP") else 0
BUSY_ANSWER_S = 5  # what Retry-After asks of a connection refused because too many are open


class Handler(BaseHTTPRequestHandler):
    server_version = "textmill"
    protocol_version = "HTTP/1.1"
    timeout = 60  # a client that stops sending mid-request cannot hold a thread forever

    def send_json(self, status: int, body, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def read_json(self):
        length = whole_number(self.headers.get("Content-Length") or "")
        if length is None:
            raise BadRequest("a Content-Length header of ASCII digits is required")
        if length > MAX_BODY_BYTES:
            # Read what a reasonable client sends before answering, so it sees the 400 and not a broken pipe.
            left = length if length <= MAX_DRAIN_BYTES else 0
            while left > 0:
                left -= len(self.rfile.read(min(left, 1 << 16))) or left
            raise BadRequest(f"the request body is larger than {MAX_BODY_BYTES} bytes")
        body = self.rfile.read(length)
        try:
            data = json.loads(body, parse_constant=refuse_constant)
        except RecursionError:
            raise BadRequest("the request body is nested too deeply") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"the request body is not valid JSON ({exc})") from None
        if has_lone_surrogate(data):
            raise BadRequest("the request holds a lone surrogate escape (\\ud800-\\udfff), which is not text")
        return data

    def client_gone(self) -> bool:
        """Whether the client has closed its connection (its end of stream, or a reset), whatever it sent before
        it closed: the socket is watched (Linux's POLLRDHUP), not only read, so bytes left unread past a request's
        body do not hide the close. A client that only shuts down its sending half is taken as gone, as nginx
        takes one. Elsewhere, a socket that reads as ended is gone."""
        try:
            if _HANGUP:
                poller = select.poll()
                poller.register(self.connection, _HANGUP)
                return bool(poller.poll(0))
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def generations(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return self.server.batcher(prompts, params, self.client_gone)

    def answer(self, work) -> None:
        stats = self.server.stats
        started = time.perf_counter()
        headers = {}
        try:
            status, body = HTTPStatus.OK, work()
        except BadRequest as exc:
            status, body = HTTPStatus.BAD_REQUEST, {"message": str(exc)}
        except Busy as exc:
            status, body, headers = HTTPStatus.SERVICE_UNAVAILABLE, {"message": str(exc)}, {"Retry-After": str(exc.seconds)}
        except ClientGone:
            with self.server.stats_lock:
                stats["requests"] += 1
                stats["abandoned"] += 1
            self.close_connection = True
            return
        except Exception as exc:  # a bug or an out-of-memory: report it, keep serving
            status, body = HTTPStatus.INTERNAL_SERVER_ERROR, {"message": f"generation failed: {type(exc).__name__}: {exc}"}
            print(f"textmill serve: {self.command} {self.path} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        with self.server.stats_lock:
            stats["requests"] += 1
            stats["errors"] += status not in (HTTPStatus.OK, HTTPStatus.SERVICE_UNAVAILABLE)
            stats["busy"] += status == HTTPStatus.SERVICE_UNAVAILABLE
        if status != HTTPStatus.OK:  # the body may be unread; do not reuse the connection
            self.close_connection = True
        try:
            self.send_json(status, body, headers)
        except ConnectionError:  # the client left while its answer was being made
            with self.server.stats_lock:
                stats["abandoned"] += 1
            self.close_connection = True
            return
        if self.server.verbose:
            print(f"{self.command} {self.path} {int(status)} {time.perf_counter() - started:.3f}s", file=sys.stderr)

    def do_PUT(self):
        if self.path != "/api":
            return self.not_found()
        generator: TextGenerator = self.server.generator

        def work():
            prompts, add_bos, params = parse_api_request(self.read_json(), generator.limits)
            generations = self.generations(generator.tokenize(prompts, add_bos, params), params)
            if params.beam_width:
                return generator.beam_response(generations[0])
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
            return generator.completion_response(self.generations(ids, params), echo, logprobs, number)

        self.answer(work)

    def do_GET(self):
        if self.path != "/health":
            return self.not_found()
        with self.server.stats_lock:
            stats = dict(self.server.stats)
        batcher = self.server.batcher
        stats |= {"batches": batcher.batches, "stopped_batches": batcher.stopped_batches, "waiting": len(batcher.pending)}
        self.send_json(HTTPStatus.OK, {"status": "ok", **self.server.generator.info, **stats})

    def not_found(self):
        self.close_connection = True
        self.send_json(HTTPStatus.NOT_FOUND, {"message": f"no endpoint {self.command} {self.path}; "
                                                          "use PUT /api, POST /v1/completions or GET /health"})

    def log_message(self, format, *args):  # one line per request comes from answer() when verbose
        pass


class Server(ThreadingHTTPServer):
    """A thread a connection, at most `max_connections` at once (Limits): one more is answered 503 with Retry-After
    on the accepting thread, without a thread of its own, so slow or idle connections cannot take the machine's
    threads (800 slowloris connections held 807 threads before)."""

    daemon_threads = True
    request_queue_size = 1024  # the listen backlog: socketserver's 5 resets connections when many clients arrive at once
    max_connections = 256
    open_connections = 0

    def process_request(self, request, client_address) -> None:
        with self.connections_lock:
            full = self.open_connections >= self.max_connections
            self.open_connections += not full
        if full:
            self.refuse(request)
        else:
            super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.connections_lock:
                self.open_connections -= 1

    def refuse(self, request) -> None:
        """503 to a connection past max_connections, sent without waiting on the client, then closed."""
        body = json.dumps({"message": f"the server is busy: {self.max_connections} connections are open already "
                           "(its --max-connections)"}).encode()
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
                f"\r\nRetry-After: {BUSY_ANSWER_S}\r\nConnection: close\r\n\r\n").encode()
        with self.stats_lock:
            self.stats["requests"] += 1
            self.stats["busy"] += 1
        try:
            request.setblocking(False)
            request.send(head + body)  # a few hundred bytes: the socket's buffer takes them at once
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        """A client that leaves mid-request is no fault of the server's; anything else is one line, not
        socketserver's traceback."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, (ConnectionError, TimeoutError)):
            print(f"textmill serve: a connection from {client_address[0]} failed: {type(exc).__name__}: {exc}",
                  file=sys.stderr)


def make_server(generator: TextGenerator, host: str = "127.0.0.1", port: int = 5000, verbose: bool = False) -> Server:
    server = Server((host, port), Handler)
    server.max_connections = generator.limits.max_connections
    server.connections_lock = threading.Lock()
    server.generator = generator
    server.batcher = Batcher(generator)
    server.verbose = verbose
    server.stats = {"requests": 0, "errors": 0, "completions": 0, "busy": 0, "abandoned": 0}
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
