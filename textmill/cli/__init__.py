"""The `textmill` command. Each corpus stage runs on its own (its tasks of the run's graph, `--workers N`):

    textmill blacklist URL_LISTS... --output DIR
    textmill scrape URL_SHARDS... --output DIR;  textmill extract SCRAPED_SHARDS... --output DIR
    textmill dedup | clean | quality | decontaminate DOC_SHARDS... --output DIR
    textmill shuffle DOC_SHARDS... --output DIR [--num-shards N]
    textmill inspect SHARD | REJECTS | MANIFEST | FOLDER | TOKEN_PREFIX [--head N] [--reason R] [--id ID] [--url URL]
    textmill tokenize --input DOCS... --output-prefix PREFIX [--vocab-file F --merge-file F] [--append-eod]
    textmill train-tokenizer --input DOCS... --output-prefix PREFIX --vocab-size N
    textmill merge-datasets --input DIR --output-prefix PREFIX
    textmill train --data-path PREFIX --vocab-file F --merge-file F --train-iters N --save DIR
    textmill evaluate lambada --load DIR --valid-data lambada_test.jsonl [--strict-lambada]
    textmill export hf --load DIR --output HF_DIR;  textmill import hf HF_DIR --save DIR
    textmill serve --load DIR [--port 5000];  textmill generate --url http://127.0.0.1:5000 | --load DIR
    textmill run CONFIG.toml [--workers N] [--scheduler-url URL];  textmill status CONFIG.toml
    textmill scheduler [--address A --port P];  textmill schedule CONFIG.toml [--install]
    textmill slurm CONFIG.toml --nodes N [--workers W] > job.sh;  sbatch job.sh
    textmill demo

Each prints a one-line summary (records in, kept, rejected by reason) and writes per-shard manifests.
Bad input ends with one `textmill: error: ...` line and exit status 2.

One module per command group, each with `add_parsers(subparsers)` and its commands: corpus (the stages),
inspect (looking at what they wrote), tokens (token files), models (train, evaluate, export, import,
checkpoint), runs (run, status, scheduler), serving (serve, generate); options holds what they share.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from textmill.errors import Interrupted, TextmillError, is_disk_error, network_failure


class CommandParser(argparse.ArgumentParser):
    """A command's parser: an option it does not know is its error, shown with its own usage (argparse would pass
    it up to `textmill`'s), and an option is never taken from a prefix of its name (`--worker 2` is not
    `--workers 2`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser; building them imports no heavy library (each command imports what it runs)."""
    from textmill.cli import corpus, inspect, models, runs, serving, tokens
    from textmill.demo.run import add_demo_parser
    from textmill.schedule import add_schedule_parser
    from textmill.slurm import add_slurm_parser
    from textmill.settings import ArgumentDefaults

    parser = argparse.ArgumentParser(
        prog="textmill",
        description="Build an OpenWebText-style corpus from URL lists and train a GPT on it.",
        formatter_class=ArgumentDefaults, allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CommandParser)
    for group in (corpus, inspect, tokens, models, runs, serving):
        group.add_parsers(sub)
    add_schedule_parser(sub)
    add_slurm_parser(sub)
    add_demo_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv[1:]  # the command's own arguments, for commands that relaunch themselves (checkpoint convert)
    return guarded(lambda: args.func(args))


def network_error(exc: Exception) -> int:
    """A server that did not answer (an object store, luigid) is one line and exit status 1, a failure a rerun
    may cure; any other exception is a fault of textmill's and goes on with its traceback."""
    failure = network_failure(exc)
    if failure is None:
        raise exc
    print(f"textmill: error: a server did not answer ({type(failure).__name__}: {str(failure)[:300]}); finished "
          "work is kept: run again once it answers", file=sys.stderr)
    return 1


def guarded(command: Callable[[], str | None]) -> int:
    """Run a command and print its summary; its exit status. A user's error is one `textmill: error:` line
    (exit 2; a failed run, 1), never a traceback."""
    try:
        summary = command()
        if summary:
            print(summary)
    except TextmillError as exc:
        print(f"textmill: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except OSError as exc:
        if not is_disk_error(exc):
            return network_error(exc)
        print(f"textmill: error: {exc.filename or 'a file'}: {exc.strerror}; free space or fix the permissions, then "
              "run again (finished work is kept)", file=sys.stderr)
        return 2
    except Exception as exc:
        return network_error(exc)
    except KeyboardInterrupt as exc:
        said = str(exc) if isinstance(exc, Interrupted) else "finished shards are kept, unfinished ones will be redone"
        print(f"textmill: interrupted; {said}", file=sys.stderr)
        return 130
    return 0
