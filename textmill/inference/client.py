"""`textmill generate`: try a model from the command line, through a server (`--url`, Megatron's `PUT /api`,
so it also talks to Megatron-LM's own server) or on this machine (`--load`).

With --prompt it answers those prompts and exits; without, it asks for a prompt and a token count in a
loop, as Megatron's tools/text_generation_cli.py does (an empty prompt or end of input stops it).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from textmill.errors import TextmillError
from textmill.io.numbers import whole_number


def put_api(url: str, request: dict, timeout: float = 600.0) -> dict:
    """Send one Megatron API request; the server's message becomes the error on anything but HTTP 200."""
    req = urllib.request.Request(url.rstrip("/") + "/api", data=json.dumps(request).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            message = json.loads(text)
            message = message.get("message", message) if isinstance(message, dict) else message
        except ValueError:
            message = text
        raise TextmillError(f"{url}: HTTP {exc.code}: {message}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise TextmillError(f"{url}: {getattr(exc, 'reason', exc)}") from None
    if isinstance(body, str):  # Megatron's server answers some errors with HTTP 200 and a bare string
        raise TextmillError(f"{url}: {body}")
    return body


def answers(body: dict) -> list[dict]:
    """A Megatron API response as one dict per text: a generation per prompt, or a beam search hypothesis."""
    count = len(body["text"])
    logprobs, scores = body.get("logprobs") or [None] * count, body.get("scores") or [None] * count
    return [{"text": t, "segments": s, "logprobs": lp, "score": sc}
            for t, s, lp, sc in zip(body["text"], body["segments"], logprobs, scores, strict=False)]


class RemoteModel:
    def __init__(self, url: str):
        self.url = url

    def __call__(self, prompts: list[str], settings: dict) -> list[dict]:
        return answers(put_api(self.url, {"prompts": prompts, **settings}))


class LocalModel:
    def __init__(self, load, device: str, bf16: bool, use_cache: bool, vocab_file=None, merge_file=None):
        from textmill.inference.requests import Limits
        from textmill.inference.server import TextGenerator

        self.generator = TextGenerator(load, Limits(), device, bf16, vocab_file, merge_file)
        self.use_cache = use_cache

    def __call__(self, prompts: list[str], settings: dict) -> list[dict]:
        from textmill.inference.requests import BadRequest, parse_api_request

        stop = settings.pop("stop", ())
        g = self.generator
        try:
            prompts, add_bos, params = parse_api_request({"prompts": prompts, **settings}, g.limits)
            params.stop, params.use_cache = tuple(stop), self.use_cache
            generations = g(g.tokenize(prompts, add_bos, params), params)
        except BadRequest as exc:
            raise TextmillError(str(exc)) from None
        if params.beam_width:
            return answers(g.beam_response(generations[0]))
        out = answers(g.api_response(generations, params.logprobs))
        for gen, answer in zip(generations, out, strict=True):
            if gen.stop_at is not None:  # cut before the stop string
                prompt = g.tokenizer.decode(gen.tokens[: gen.prompt_length])
                answer["text"] = prompt + g.tokenizer.decode(gen.generated)[: gen.stop_at]
        return out


def show(result: dict, logprobs: bool) -> str:
    lines = [result["text"]]
    if result["score"] is not None:
        lines.append(f"  score: {result['score']:.4f}")
    if logprobs and result["logprobs"] is not None:
        pairs = zip(result["segments"][1:], result["logprobs"], strict=False)
        lines.append("  logprobs: " + " ".join(f"{s!r}:{lp:.2f}" for s, lp in pairs))
    return "\n".join(lines)


def run_client(model, prompts: list[str] | None, settings: dict, logprobs: bool, ask=input) -> str:
    """Answer `prompts`, or ask for prompts in a loop; the closing summary line."""
    started, answered, tokens = time.perf_counter(), 0, 0
    if prompts:
        # Beam search answers one prompt per request, with its best sequences.
        requests = [[p] for p in prompts] if settings.get("beam_width") else [prompts]
        for request in requests:
            for result in model(request, dict(settings)):
                print(show(result, logprobs), flush=True)
                tokens += len(result["segments"])
            answered += len(request)
    else:
        while True:
            try:
                prompt = ask("Enter prompt: ")
                if not prompt:
                    break
                count = ask("Enter number of tokens to generate: ")
            except EOFError:
                break
            tokens = whole_number(count)
            if tokens is None:
                print("the number of tokens must be a whole number", flush=True)
                continue
            try:
                results = model([prompt], {**settings, "tokens_to_generate": tokens})
            except TextmillError as exc:
                print(f"error: {exc}", flush=True)
                continue
            for result in results:
                print(f"Response: {show(result, logprobs)}", flush=True)
                tokens += len(result["segments"])
            answered += 1
    seconds = time.perf_counter() - started
    return f"generate: {answered} prompt(s) answered, {tokens} tokens of text [{seconds:.1f}s]"
