"""`textmill serve | generate`: text from a checkpoint, over HTTP or on this machine."""

from __future__ import annotations

from pathlib import Path

from textmill.cli.options import DocstringHelpFormatter, add_tokenizer_files, check_checkpoint
from textmill.errors import TextmillError


def cmd_serve(args) -> str:
    check_checkpoint(args.load, args.vocab_file, args.merge_file)
    from textmill.inference.requests import Limits
    from textmill.inference.server import TextGenerator, make_server, serve_until_stopped
    from textmill.report.lines import serve_banner, served_line
    from textmill.trainer.device import pick_device

    for flag in ("max_prompts", "max_prompt_tokens", "max_tokens_to_generate", "max_beam_width", "max_waiting",
                 "max_connections"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise TextmillError(f"--{flag.replace('_', '-')} must be at least 1")
    limits = Limits(args.max_prompts, args.max_prompt_tokens, args.max_tokens_to_generate, args.max_beam_width,
                    args.max_waiting, args.max_connections)
    generator = TextGenerator(args.load, limits, pick_device(args.device), args.bf16, args.vocab_file, args.merge_file)
    try:
        server = make_server(generator, args.host, args.port, args.verbose)
    except OSError as exc:
        raise TextmillError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    print(serve_banner(generator.info, *server.server_address[:2]), flush=True)
    seconds = serve_until_stopped(server)
    return served_line(server.stats, seconds)


def cmd_generate(args) -> str:
    if args.load:
        check_checkpoint(args.load, args.vocab_file, args.merge_file)
    from textmill.inference.client import LocalModel, RemoteModel, run_client
    from textmill.trainer.device import pick_device

    if args.url and args.stop:
        raise TextmillError("--stop works with --load only (Megatron's API has no stop strings); use --stop-on-eol")
    if args.url and not args.kv_cache:
        raise TextmillError("--no-kv-cache works with --load only")
    if args.url:
        model = RemoteModel(args.url)
    else:
        model = LocalModel(args.load, pick_device(args.device), args.bf16, args.kv_cache, args.vocab_file, args.merge_file)
    settings = {"tokens_to_generate": args.tokens_to_generate, "temperature": args.temperature,
                "top_k": 1 if args.greedy else args.top_k, "top_p": args.top_p, "logprobs": args.logprobs,
                "stop_on_eol": args.stop_on_eol}
    if not args.beam_width and (args.stop_token is not None or args.length_penalty != 1.0):
        raise TextmillError("--stop-token and --length-penalty are settings of beam search: add --beam-width")
    if args.beam_width:
        sampling = [flag for flag, given in (("--temperature", args.temperature != 1.0), ("--top-k", args.top_k),
                    ("--top-p", args.top_p), ("--greedy", args.greedy), ("--seed", args.seed is not None),
                    ("--logprobs", args.logprobs), ("--stop-on-eol", args.stop_on_eol), ("--stop", args.stop)) if given]
        if sampling:
            raise TextmillError(f"--beam-width takes no {', '.join(sampling)}: beam search is deterministic and ends a "
                                "sequence at --stop-token")
        settings = {"tokens_to_generate": args.tokens_to_generate, "beam_width": args.beam_width,
                    "length_penalty": args.length_penalty}
        if args.stop_token is not None:
            settings["stop_token"] = args.stop_token
    if args.seed is not None:
        settings["random_seed"] = args.seed
    if args.stop:
        settings["stop"] = args.stop
    return run_client(model, args.prompt, settings, args.logprobs)


def add_parsers(sub) -> None:
    from textmill.inference import client, server

    saved_tokenizer = "the tokenizer to use (default: the copies the trainer keeps in LOAD/tokenizer/)"
    p = sub.add_parser("serve", help="Serve a checkpoint over HTTP with Megatron-LM's text generation API.",
                       description=server.__doc__, formatter_class=DocstringHelpFormatter)
    p.add_argument("--load", type=Path, required=True, help="checkpoint directory (its newest checkpoint, any layout)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 serves every interface)")
    p.add_argument("--port", type=int, default=5000, help="port (0: any free port, printed at start)")
    p.add_argument("--max-prompts", type=int, default=128, help="most prompts in one request")
    p.add_argument("--max-prompt-tokens", type=int, help="longest prompt in tokens (default: the model's positions)")
    p.add_argument("--max-tokens-to-generate", type=int,
                   help="most tokens one request may ask for (default: the model's positions)")
    p.add_argument("--max-beam-width", type=int, default=16,
                   help="widest beam search one request may ask for (each beam holds a key/value cache and a step's "
                   "logits over the vocabulary)")
    p.add_argument("--max-waiting", type=int, default=64,
                   help="most requests queued behind the batch being generated; one more is answered 503 with a "
                   "Retry-After header")
    p.add_argument("--max-connections", type=int, default=256,
                   help="most connections open at once, each served by a thread of its own (an idle or slow client "
                   "holds one); one more is answered 503 with a Retry-After header and closed")
    add_tokenizer_files(p, saved_tokenizer)
    p.add_argument("--device", default="auto", help="cuda, cpu, or auto")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast")
    p.add_argument("--verbose", action="store_true", help="log one line per request (method, path, status, seconds) to stderr")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("generate", help="Generate text from a checkpoint, through a server (--url) or locally (--load).",
                       description=client.__doc__, formatter_class=DocstringHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", help="a textmill or Megatron-LM server, e.g. http://127.0.0.1:5000")
    source.add_argument("--load", type=Path, help="checkpoint directory to generate from on this machine")
    p.add_argument("--prompt", action="append", help="a prompt (repeat for a batch); without it, ask in a loop")
    p.add_argument("--tokens-to-generate", type=int, default=64, help="tokens to generate per prompt (with --prompt)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature, in (0, 100]")
    p.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (0: all; 1: greedy)")
    p.add_argument("--top-p", type=float, default=0.0,
                   help="sample from the smallest set of tokens with this much probability (0: off)")
    p.add_argument("--greedy", action="store_true", help="always take the most likely token (same as --top-k 1)")
    p.add_argument("--seed", type=int, help="random seed of the sampling (default: a fresh one each time)")
    p.add_argument("--stop", action="append", help="stop when the generated text contains this string (repeatable; --load only)")
    p.add_argument("--stop-on-eol", action="store_true", help="stop after the first newline")
    p.add_argument("--logprobs", action="store_true", help="also print each token's log-probability")
    p.add_argument("--beam-width", type=int, default=0,
                   help="beam search with this many beams instead of sampling: prints the best sequences of each "
                        "prompt, best first, with their scores (0: sample)")
    p.add_argument("--length-penalty", type=float, default=1.0,
                   help="beam search: a sequence scores its log-probability / generated tokens ** this "
                        "(0: no normalisation, favours short sequences; larger favours long ones)")
    p.add_argument("--stop-token", type=int,
                   help="beam search: the token id that ends a sequence (default: the end-of-document token)")
    p.add_argument("--no-kv-cache", dest="kv_cache", action="store_false",
                   help="recompute the whole prefix for every token (--load only; for comparison)")
    add_tokenizer_files(p, saved_tokenizer)
    p.add_argument("--device", default="auto", help="cuda, cpu, or auto (--load)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (--load)")
    p.set_defaults(func=cmd_generate)
