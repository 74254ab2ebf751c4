"""The `textmill` command. Each corpus stage runs on its own:

    textmill blacklist URL_LISTS... --output DIR
    textmill scrape URL_SHARDS... --output DIR
    textmill dedup | clean | decontaminate DOC_SHARDS... --output DIR
    textmill shuffle DOC_SHARDS... --output DIR --num-shards N
    textmill tokenize --input DOCS... --output-prefix PREFIX [--vocab-file F --merge-file F] [--append-eod]
    textmill train-tokenizer --input DOCS... --output-prefix PREFIX --vocab-size N
    textmill merge-datasets --input DIR --output-prefix PREFIX
    textmill train --data-path PREFIX --vocab-file F --merge-file F --train-iters N --save DIR
    textmill evaluate lambada --load DIR --valid-data lambada_test.jsonl [--strict-lambada]
    textmill export hf --load DIR --output HF_DIR;  textmill import hf HF_DIR --save DIR
    textmill serve --load DIR [--port 5000];  textmill generate --url http://127.0.0.1:5000 | --load DIR
    textmill run CONFIG.toml [--workers N];  textmill status CONFIG.toml;  textmill schedule CONFIG.toml [--install]
    textmill demo

Each prints a one-line summary (records in, kept, rejected by reason) and writes per-shard manifests.
Bad input ends with one `textmill: error: ...` line and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from textmill.errors import RunFailed, TextmillError, is_disk_error


def summary_line(stage: str, manifests: list[dict], output: Path, seconds: float) -> str:
    from textmill.report import stage_line, stage_summary

    return stage_line(stage_summary(stage, manifests, output, seconds))


def cmd_blacklist(args) -> str:
    from textmill.pipeline.blacklist import UrlRules, blacklist_files

    started = time.perf_counter()
    rules = UrlRules.with_extra(args.domain_blacklist, args.extension_blacklist)
    manifests = blacklist_files(args.inputs, Path(args.output), rules)
    return summary_line("blacklist", manifests, Path(args.output), time.perf_counter() - started)


def scrape_config(args):
    from textmill.pipeline.scrape import ScrapeConfig

    return ScrapeConfig(
        concurrency=args.concurrency,
        timeout_s=args.timeout,
        extract_timeout_s=args.extract_timeout,
        max_bytes=args.max_bytes,
        max_redirects=args.max_redirects,
        allow_private=args.allow_private_addresses,
        allow_networks=tuple(args.allow_network),
        keep_html=args.keep_html,
    )


def cmd_scrape(args) -> str:
    from textmill.pipeline.scrape import scrape_shards
    from textmill.pipeline.shards import list_shards

    started = time.perf_counter()
    manifests = scrape_shards(list_shards(args.inputs), Path(args.output), scrape_config(args), args.extract_workers)
    return summary_line("scrape", manifests, Path(args.output), time.perf_counter() - started)


def cmd_dedup(args) -> str:
    from textmill.pipeline.dedup import DedupConfig, dedup_shards
    from textmill.pipeline.shards import list_shards

    started = time.perf_counter()
    cfg = DedupConfig(args.shingle_size, args.shingle_unit, args.num_perm, args.bands, args.threshold, args.seed)
    from textmill.report import dedup_line

    manifests, clusters = dedup_shards(list_shards(args.inputs), Path(args.output), cfg)
    return summary_line("dedup", manifests, Path(args.output), time.perf_counter() - started) + "\n" + dedup_line(clusters)


def gpt2_tokenizer(args):
    """The tokenizer named by --vocab-file/--merge-file, or None when neither is given."""
    from textmill.tokenizers.gpt2 import GPT2Tokenizer

    if (args.vocab_file is None) != (args.merge_file is None):
        raise TextmillError("--vocab-file and --merge-file go together")
    return GPT2Tokenizer(args.vocab_file, args.merge_file) if args.vocab_file else None


def cmd_clean(args) -> str:
    from textmill.pipeline.clean import CleanConfig, clean_shards
    from textmill.pipeline.shards import list_shards

    started = time.perf_counter()
    cfg = CleanConfig(args.language, args.min_tokens, args.langdetect_chars, args.seed)
    manifests = clean_shards(list_shards(args.inputs), Path(args.output), cfg, gpt2_tokenizer(args))
    return summary_line("clean", manifests, Path(args.output), time.perf_counter() - started)


def cmd_shuffle(args) -> str:
    from textmill.pipeline.shards import list_shards
    from textmill.pipeline.shuffle import shuffle_shards

    started = time.perf_counter()
    manifests = shuffle_shards(list_shards(args.inputs), Path(args.output), args.num_shards, args.seed)
    return summary_line("shuffle", manifests, Path(args.output), time.perf_counter() - started)


def cmd_decontaminate(args) -> str:
    from textmill.pipeline.decontaminate import DecontaminateConfig, decontaminate_shards
    from textmill.pipeline.shards import list_shards

    started = time.perf_counter()
    cfg = DecontaminateConfig(args.ngram, args.min_ngram, args.cut_chars, args.min_fragment_chars, args.max_pieces, args.key_threshold)
    from textmill.report import decontaminate_line

    manifests, info = decontaminate_shards(list_shards(args.inputs), Path(args.output), [Path(p) for p in args.eval_set], cfg)
    return summary_line("decontaminate", manifests, Path(args.output), time.perf_counter() - started) + "\n" + decontaminate_line(info, cfg.key_threshold)


def tokenize_line(m: dict, output_prefix: str | Path, started: float) -> str:
    from textmill.tokenizers.preprocess import dataset_prefix, rejects_file

    c = m["counts"]
    reasons = ", ".join(f"{k} {v}" for k, v in m["reasons"].items()) or "none"
    where = f"; first: {m['first_rejects'][0]} (all in {rejects_file(output_prefix)})" if c["rejected"] else ""
    tokens = ", ".join(f"{dataset_prefix(output_prefix, k)}.bin/.idx {n:,} tokens" for k, n in c["tokens"].items())
    return (
        f"tokenize: {len(m['inputs'])} file(s), {c['input']} documents in, {c['kept']} written, "
        f"{c['rejected']} rejected ({reasons}{where})\n  {tokens} ({m['params']['dtype']}), "
        f"{m['mb_per_s']} MB/s [{time.perf_counter() - started:.1f}s]"
    )


def trained_line(tokenizer) -> str:
    return f"train-tokenizer: {tokenizer.vocab_size}-token byte-level BPE -> {tokenizer.files[0]}, {tokenizer.files[1]}"


def cmd_tokenize(args) -> str:
    from textmill.pipeline.shards import list_shards
    from textmill.tokenizers.preprocess import TokenizeConfig, tokenize_files
    from textmill.tokenizers.train import train_bpe_on_files

    started = time.perf_counter()
    inputs = list_shards(args.inputs)
    lines = []
    tokenizer = gpt2_tokenizer(args)
    if tokenizer is None:
        tokenizer = train_bpe_on_files(inputs, tuple(args.json_keys), args.vocab_size, args.output_prefix, args.min_frequency)
        lines.append(trained_line(tokenizer))
    cfg = TokenizeConfig(tuple(args.json_keys), args.append_eod, args.workers)
    m = tokenize_files(inputs, args.output_prefix, tokenizer, cfg)
    return "\n".join([*lines, tokenize_line(m, args.output_prefix, started)])


def cmd_train_tokenizer(args) -> str:
    from textmill.pipeline.shards import list_shards
    from textmill.tokenizers.train import train_bpe_on_files

    started = time.perf_counter()
    tokenizer = train_bpe_on_files(list_shards(args.inputs), tuple(args.json_keys), args.vocab_size, args.output_prefix,
                                   args.min_frequency)
    return f"{trained_line(tokenizer)} [{time.perf_counter() - started:.1f}s]"


def cmd_merge_datasets(args) -> str:
    from textmill.megatron.indexed import merge_directory

    started = time.perf_counter()
    merged, parts = merge_directory(Path(args.input), Path(args.output_prefix))
    return (f"merge-datasets: {parts} dataset(s), {merged.num_documents:,} documents, {int(merged.lengths.sum()):,} tokens "
            f"-> {args.output_prefix}.bin/.idx [{time.perf_counter() - started:.1f}s]")


def cmd_train(args) -> str:
    from textmill.trainer.train import run

    return run(args)


def cmd_evaluate_lambada(args) -> str:
    from textmill.evaluate.lambada import evaluate_lambada
    from textmill.trainer.train import pick_device

    started = time.perf_counter()
    r = evaluate_lambada(args.load, args.valid_data, args.strict_lambada, args.vocab_file, args.merge_file,
                         args.micro_batch_size, pick_device(args.device), args.bf16, args.output, progress=True)
    # Megatron's closing line, then ours.
    print(f"number correct: {r['correct']} | total examples: {r['total']} | avg accuracy: {r['accuracy']:.4E}")
    truncated = f", {r['truncated']} passage(s) cut to the model's positions" if r["truncated"] else ""
    return (f"evaluate lambada{' (strict)' if r['strict'] else ''}: iteration {r['iteration']}, accuracy "
            f"{r['accuracy']:.2%} ({r['correct']}/{r['total']}), last-word perplexity {r['perplexity']:.2f}{truncated} "
            f"-> {r['output']} [{time.perf_counter() - started:.1f}s]")


def cmd_export_hf(args) -> str:
    from textmill.interop.hf import export_hf

    started = time.perf_counter()
    r = export_hf(args.load, args.output, args.vocab_file, args.merge_file)
    return (f"export hf: {r['family']} model, {r['parameters']:,} parameters, vocabulary {r['vocab_size']}, "
            f"iteration {r['iteration']} -> {r['output']} [{time.perf_counter() - started:.1f}s]")


def cmd_import_hf(args) -> str:
    from textmill.interop.hf import import_hf

    started = time.perf_counter()
    r = import_hf(args.folder, args.save, args.make_vocab_size_divisible_by, args.vocab_file, args.merge_file)
    return (f"import hf: {r['family']} model, {r['parameters']:,} parameters, vocabulary {r['vocab_size']} padded to "
            f"{r['padded_vocab_size']} -> {r['output']}/release [{time.perf_counter() - started:.1f}s]")


def cmd_checkpoint_convert(args) -> str:
    from textmill.interop.convert import convert_checkpoint

    r = convert_checkpoint(args.load, args.save, args.target_tensor_parallel_size, args.target_pipeline_parallel_size,
                           args.ckpt_format, args.argv[1:])
    if r is None:
        return ""
    return (f"checkpoint convert: {r['parameters']:,} parameters from {r['from']} -> {r['to']} "
            f"(tensor parallel {r['tp']}, pipeline parallel {r['pp']}, {r['format']}; weights only) [{r['seconds']:.1f}s]")


def cmd_serve(args) -> str:
    import signal
    import threading

    from textmill.inference.server import Limits, TextGenerator, make_server
    from textmill.trainer.train import pick_device

    limits = Limits(args.max_prompts, args.max_prompt_tokens, args.max_tokens_to_generate)
    generator = TextGenerator(args.load, limits, pick_device(args.device), args.bf16, args.vocab_file, args.merge_file)
    try:
        server = make_server(generator, args.host, args.port, args.verbose)
    except OSError as exc:
        raise TextmillError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    host, port = server.server_address[:2]
    info = generator.info
    print(f"serve: {info['checkpoint']} (iteration {info['iteration']}, {info['parameters']:,} parameters) on "
          f"http://{host}:{port}  PUT /api, POST /v1/completions, GET /health; Ctrl-C stops", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    started = time.perf_counter()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stop.wait()
    server.shutdown()
    server.server_close()
    stats = server.stats
    return (f"serve: stopped after {stats['requests']} request(s), {stats['errors']} answered with an error "
            f"[{time.perf_counter() - started:.1f}s]")


def cmd_generate(args) -> str:
    from textmill.inference.client import LocalModel, RemoteModel, run_client
    from textmill.trainer.train import pick_device

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
    if args.seed is not None:
        settings["random_seed"] = args.seed
    if args.stop:
        settings["stop"] = args.stop
    return run_client(model, args.prompt, settings, args.logprobs)


def cmd_run(args) -> str:
    from textmill.config import EXAMPLE, load_config
    from textmill.report import run_lines
    from textmill.workflows.runner import run_workflow

    if args.example_config:
        return EXAMPLE.rstrip()
    if args.config is None:
        raise TextmillError("give the run's TOML file (textmill run --example-config prints a documented one)")
    load_config(args.config)  # a bad config is one error line before Luigi starts
    ok, summary, record, folder = run_workflow(args.config, args.workers, args.scheduler_url)
    if not ok:
        print(summary, file=sys.stderr)
        print(f"textmill run: failed after {record['seconds']:.1f}s (recorded in {folder}); `textmill run` again redoes "
              "only what is not finished", file=sys.stderr)
        failed = record.get("failed") or ["no task failed here, but the graph is not finished (see the summary above)"]
        more = f" (and {len(failed) - 1} more: textmill status)" if len(failed) > 1 else ""
        print(f"textmill run: failed: {failed[0]}{more}", file=sys.stderr)
        raise SystemExit(1)
    return "\n".join(run_lines(record, folder))


RUN_HELP = """\
Run the whole chain a TOML file describes as one Luigi graph: blacklist, scrape, dedup, clean, shuffle,
decontaminate, tokenize, then (with [train] enabled) train, evaluate and export. Only what is not
finished runs; `textmill run --example-config` prints a TOML file documenting every field.

What it writes, under [run] work_dir (WORK):
  WORK/<stage>/<key>/        each stage's output, in a folder named by the settings that made it
  WORK/runs/<date_time>/     this run's record (run.json) and report.html
  WORK/report.html           the newest run's report: funnel, histograms, loss curves, evaluation, timings
  WORK/results.md            the last runs side by side, with REGRESSION notes (WORK/results.tsv: all runs)

When it fails it exits with status 1 and Luigi's summary. `textmill status CONFIG` lists each failed task
with its error; fix the cause and run again: finished tasks are kept, only the rest runs.
"""


def cmd_status(args) -> str:
    from collections import Counter

    from textmill.config import load_config
    from textmill.workflows.runner import task_states

    load_config(args.config)
    states = task_states(args.config)
    for s in states:
        if args.all or s["state"] != "done":
            print(f"{s['state']:<8} {s['task']}" + (f"  {s['reason']}" if s["reason"] else ""))
    counts = Counter(s["state"] for s in states)
    return (f"status: {len(states)} task(s): {counts['done']} done, {counts['pending']} pending, {counts['failed']} failed"
            + ("" if args.all else " (--all lists the done ones too)"))


class DocstringHelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown, and a module docstring used as the description keeps its line breaks."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="textmill",
        description="Build an OpenWebText-style corpus from URL lists and train a GPT on it.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fmt = argparse.ArgumentDefaultsHelpFormatter

    def stage(name: str, help: str, inputs_help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, formatter_class=fmt)
        p.add_argument("inputs", nargs="+", metavar="INPUT", help=inputs_help)
        p.add_argument("--output", "-o", required=True, help="output directory: one shard per input shard, with rejects and a manifest")
        return p

    docs = "document shards (Parquet from an earlier stage, or loose JSON lines with a 'text' field), or directories of them"

    p = stage("blacklist", "Filter URL lists: malformed, non-http(s), too short, blacklisted domain or extension, duplicate.",
              "URL lists (.txt, .gz, .bz2, .xz; one URL a line) or directories of them; each file becomes one shard")
    p.add_argument("--domain-blacklist", action="append", default=[], type=Path, metavar="FILE",
                   help="extra domain labels to block, one a line (adds to the bundled list; repeatable)")
    p.add_argument("--extension-blacklist", action="append", default=[], type=Path, metavar="FILE",
                   help="extra file extensions to block, one a line (adds to the bundled list; repeatable)")
    p.set_defaults(func=cmd_blacklist)

    p = stage("scrape", "Fetch every URL of the URL shards and extract title and text with newspaper3k.",
              "URL shards written by `textmill blacklist`, or directories of them")
    p.add_argument("--concurrency", type=int, default=32, help="URLs fetched at once")
    p.add_argument("--timeout", type=float, default=30.0, help="hard wall-clock limit per URL in seconds (DNS, redirects and body included)")
    p.add_argument("--extract-timeout", type=float, default=10.0,
                   help="hard limit in seconds on newspaper3k's time per page; a page over it is rejected as "
                   "extraction_timeout and its extraction process replaced")
    p.add_argument("--max-bytes", type=int, default=5 * 1024 * 1024, help="largest page body accepted, after decompression")
    p.add_argument("--max-redirects", type=int, default=5, help="redirects followed per URL")
    p.add_argument("--allow-private-addresses", action="store_true",
                   help="fetch from private, loopback and link-local addresses (refused by default)")
    p.add_argument("--allow-network", action="append", default=[], metavar="CIDR",
                   help="fetch from this non-public address or network all the same, e.g. a local mirror at "
                   "10.0.0.5 or 127.0.0.2/32 (repeatable; narrower than --allow-private-addresses)")
    p.add_argument("--keep-html", action="store_true", help="also write NAME.html.parquet with the raw HTML of each fetched page")
    p.add_argument("--extract-workers", type=int, default=2, help="processes running newspaper3k (0: threads in this process, where --extract-timeout cannot stop a page: "
                   "for trusted pages only)")
    p.set_defaults(func=cmd_scrape)

    p = stage("dedup", "Remove near-duplicate documents with MinHash LSH; the first document of each cluster stays.", docs)
    p.add_argument("--shingle-size", type=int, default=5, help="n of the n-gram shingles")
    p.add_argument("--shingle-unit", choices=["word", "char"], default="word", help="shingle words or characters (Megatron: char)")
    p.add_argument("--num-perm", type=int, default=128, help="MinHash permutations (signature length)")
    p.add_argument("--bands", type=int, default=16, help="LSH bands; num-perm must be divisible by it")
    p.add_argument("--threshold", type=float, default=0.7, help="estimated Jaccard similarity at or above which documents are duplicates")
    p.add_argument("--seed", type=int, default=1, help="MinHash seed")
    p.set_defaults(func=cmd_dedup)

    p = stage("clean", "Fix mojibake with ftfy, keep one language (seeded langdetect), drop short documents.", docs)
    p.add_argument("--language", default="en", help="langdetect code of the language to keep")
    p.add_argument("--min-tokens", type=int, default=128, help="drop documents with fewer tokens (end-of-document token included)")
    p.add_argument("--langdetect-chars", type=int, default=4000, help="characters of each document langdetect reads")
    p.add_argument("--seed", type=int, default=0, help="langdetect seed")
    p.add_argument("--vocab-file", help="GPT-2 vocab.json: count exact BPE tokens (default: a lower bound, no vocabulary needed)")
    p.add_argument("--merge-file", help="GPT-2 merges.txt, with --vocab-file")
    p.set_defaults(func=cmd_clean)

    p = stage("shuffle", "Shuffle all documents globally with a seed, out of core, into N shards.", docs)
    p.add_argument("--num-shards", type=int, required=True, help="number of output shards (buckets)")
    p.add_argument("--seed", type=int, default=1234, help="shuffle seed")
    p.set_defaults(func=cmd_shuffle)

    p = stage("decontaminate", "Cut evaluation-set n-gram overlaps (e.g. LAMBADA) out of training documents.", docs)
    p.add_argument("--eval-set", action="append", required=True, metavar="FILE",
                   help="evaluation set as JSON lines with a 'text' field, e.g. lambada_test.jsonl (repeatable)")
    p.add_argument("--ngram", type=int, default=13, help="n-gram length matched")
    p.add_argument("--min-ngram", type=int, default=8, help="evaluation texts of this many words up to ngram-1 are matched whole")
    p.add_argument("--cut-chars", type=int, default=200, help="characters removed on each side of a match")
    p.add_argument("--min-fragment-chars", type=int, default=200, help="fragments this short or shorter are dropped")
    p.add_argument("--max-pieces", type=int, default=10, help="documents cut into more fragments are dropped whole")
    p.add_argument("--key-threshold", type=int, default=10, help="n-grams seen this often or more in training are not used")
    p.set_defaults(func=cmd_decontaminate)

    def tokenizer_training_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--vocab-size", type=int, default=50257,
                       help="size of a trained vocabulary: 256 bytes + merges + <|endoftext|>")
        p.add_argument("--min-frequency", type=int, default=2, help="a pair seen fewer times is never merged")

    texts = ("documents: loose JSON lines (Megatron's input format) or Parquet shards from `textmill shuffle`, "
             "or directories of them; read in the order given, files of a directory in name order")
    p = sub.add_parser("tokenize", help="GPT-2 BPE-encode documents into Megatron .bin/.idx files (tools/preprocess_data.py).",
                       description="GPT-2 BPE-encode documents into Megatron .bin/.idx files, as Megatron-LM's "
                       "tools/preprocess_data.py does. Without --vocab-file/--merge-file a byte-level BPE is first "
                       "trained on the input and saved as PREFIX-vocab.json and PREFIX-merges.txt.", formatter_class=fmt)
    p.add_argument("--input", dest="inputs", nargs="+", required=True, metavar="PATH", help=texts)
    p.add_argument("--output-prefix", required=True,
                   help="writes PREFIX_KEY_document.bin/.idx per JSON key, PREFIX.rejects.jsonl and PREFIX.manifest.json")
    p.add_argument("--json-keys", nargs="+", default=["text"], help="fields to tokenize; one dataset per field")
    p.add_argument("--vocab-file", help="GPT-2 vocab.json (e.g. gpt2-vocab.json)")
    p.add_argument("--merge-file", help="GPT-2 merges.txt (e.g. gpt2-merges.txt)")
    p.add_argument("--append-eod", action="store_true", help="end every non-empty document with <|endoftext|>")
    p.add_argument("--workers", type=int, default=2, help="encoding threads (the encoder runs outside the GIL)")
    tokenizer_training_options(p)
    p.set_defaults(func=cmd_tokenize)

    p = sub.add_parser("train-tokenizer", help="Train a byte-level BPE and save it as GPT-2 vocab.json + merges.txt.",
                       description="Train a byte-level BPE on documents and save it in GPT-2's two-file format, "
                       "which Megatron-LM (--vocab-file/--merge-file), transformers and textmill load.", formatter_class=fmt)
    p.add_argument("--input", dest="inputs", nargs="+", required=True, metavar="PATH", help=texts)
    p.add_argument("--output-prefix", required=True, help="writes PREFIX-vocab.json and PREFIX-merges.txt")
    p.add_argument("--json-keys", nargs="+", default=["text"], help="fields whose text is learned from")
    tokenizer_training_options(p)
    p.set_defaults(func=cmd_train_tokenizer)

    p = sub.add_parser("merge-datasets", help="Concatenate the .bin/.idx datasets of a directory (tools/merge_datasets.py).",
                       description="Concatenate every .bin/.idx dataset in a directory, in sorted name order, into "
                       "one dataset, as Megatron-LM's tools/merge_datasets.py does.", formatter_class=fmt)
    p.add_argument("--input", required=True, help="directory holding PREFIX.bin/PREFIX.idx pairs and nothing else of that kind")
    p.add_argument("--output-prefix", required=True, help="writes PREFIX.bin and PREFIX.idx")
    p.set_defaults(func=cmd_merge_datasets)

    from textmill.trainer.config import add_train_arguments

    p = sub.add_parser("train", help="Train a GPT on .bin/.idx token files (Megatron's pretrain_gpt.py arguments).",
                       description="Train a GPT (GPT-2, or LLaMA-style blocks) on Megatron .bin/.idx datasets, with "
                       "Megatron's data split, sample index, schedule and checkpoint layout.", formatter_class=fmt)
    add_train_arguments(p)
    p.set_defaults(func=cmd_train)

    tokenizer_files = ("GPT-2 vocab.json and merges.txt (default: the copies the trainer keeps in "
                       "LOAD/tokenizer/)")
    p = sub.add_parser("evaluate", help="Evaluate a checkpoint (LAMBADA, as Megatron's tasks/zeroshot_gpt).",
                       description="Evaluate a checkpoint.", formatter_class=fmt)
    tasks = p.add_subparsers(dest="task", required=True, metavar="TASK")
    p = tasks.add_parser("lambada", help="LAMBADA last-word accuracy and perplexity.", formatter_class=fmt,
                         description="LAMBADA last-word prediction as Megatron-LM's tasks/zeroshot_gpt scores it: greedy, "
                         "teacher-forced exact match of the target tokens; also the last word's perplexity. Prints "
                         "Megatron's result line and writes a JSON result.")
    p.add_argument("--load", type=Path, required=True, help="checkpoint directory (its newest checkpoint is used)")
    p.add_argument("--valid-data", type=Path, required=True, help='LAMBADA JSON lines, one {"text": ...} per passage')
    p.add_argument("--strict-lambada", action="store_true",
                   help="target = the whole last word (default: the last BPE token, as Megatron's default)")
    p.add_argument("--vocab-file", type=Path, help=tokenizer_files)
    p.add_argument("--merge-file", type=Path, help=tokenizer_files)
    p.add_argument("--micro-batch-size", type=int, default=8, help="passages per forward pass")
    p.add_argument("--device", default="auto", help="cuda, cpu, or auto")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast")
    p.add_argument("--output", type=Path, help="result JSON (default: LOAD/lambada.json or LOAD/lambada-strict.json)")
    p.set_defaults(func=cmd_evaluate_lambada)

    p = sub.add_parser("export", help="Export a checkpoint to another format (Hugging Face).",
                       description="Export a checkpoint to another format.", formatter_class=fmt)
    formats = p.add_subparsers(dest="format", required=True, metavar="FORMAT")
    p = formats.add_parser("hf", help="A Hugging Face transformers folder (GPT2LMHeadModel or LlamaForCausalLM).",
                           formatter_class=fmt,
                           description="Write the newest checkpoint as a Hugging Face folder: config.json, "
                           "model.safetensors (fp32), vocab.json, merges.txt and tokenizer config, which "
                           "AutoModelForCausalLM / AutoTokenizer / pipeline('text-generation') load as they are.")
    p.add_argument("--load", type=Path, required=True, help="checkpoint directory (its newest checkpoint is exported)")
    p.add_argument("--output", type=Path, required=True, help="folder to write (replaced if it exists)")
    p.add_argument("--vocab-file", type=Path, help=tokenizer_files)
    p.add_argument("--merge-file", type=Path, help=tokenizer_files)
    p.set_defaults(func=cmd_export_hf)

    p = sub.add_parser("import", help="Import a model from another format (Hugging Face).",
                       description="Import a model from another format.", formatter_class=fmt)
    formats = p.add_subparsers(dest="format", required=True, metavar="FORMAT")
    p = formats.add_parser("hf", help="A Hugging Face GPT-2 or LLaMA folder into a textmill checkpoint.", formatter_class=fmt,
                           description="Turn a Hugging Face GPT-2 (or LLaMA-architecture) folder into a textmill "
                           "'release' checkpoint that evaluate, export and train --load (with --finetune) accept.")
    p.add_argument("folder", type=Path, help="folder with config.json and model.safetensors (or pytorch_model.bin)")
    p.add_argument("--save", type=Path, required=True, help="checkpoint directory to write")
    p.add_argument("--vocab-file", type=Path, help="GPT-2 vocab.json (default: FOLDER/vocab.json)")
    p.add_argument("--merge-file", type=Path, help="GPT-2 merges.txt (default: FOLDER/merges.txt)")
    p.add_argument("--make-vocab-size-divisible-by", type=int, default=128, help="pad the vocabulary as the trainer does")
    p.set_defaults(func=cmd_import_hf)

    p = sub.add_parser("checkpoint", help="Rewrite checkpoints (Megatron's tools/checkpoint_util.py).",
                       description="Work on checkpoints.", formatter_class=fmt)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser("convert", formatter_class=fmt,
                           help="Rewrite a checkpoint's weights sharded for a tensor/pipeline-parallel layout.",
                           description="Rewrite the newest checkpoint of --load into --save, sharded for the target "
                           "layout (TP x PP processes are started, each writes its part), or as one file. Training "
                           "reads any checkpoint into any layout anyway; this is for files in a given layout. Weights "
                           "only, as checkpoint_util: a run resumed from the result starts a fresh optimizer.")
    p.add_argument("--load", type=Path, required=True, help="checkpoint directory to read (its newest checkpoint)")
    p.add_argument("--save", type=Path, required=True, help="checkpoint directory to write")
    p.add_argument("--target-tensor-parallel-size", type=int, default=1, help="tensor-parallel size of the files written")
    p.add_argument("--target-pipeline-parallel-size", type=int, default=1, help="pipeline-parallel size of the files written")
    p.add_argument("--ckpt-format", choices=["torch", "torch_dist"], default="torch_dist",
                   help="torch_dist: one shard file per rank of the layout; torch: one file (layout 1 x 1 only)")
    p.set_defaults(func=cmd_checkpoint_convert)

    p = sub.add_parser("run", help="Run the whole graph a TOML file describes, redoing only what is not finished.",
                       description=RUN_HELP, formatter_class=DocstringHelpFormatter)
    p.add_argument("config", type=Path, nargs="?", help="the run's TOML file")
    p.add_argument("--workers", type=int, default=1, help="tasks run at once by this process (Luigi workers)")
    p.add_argument("--scheduler-url", help="a central luigid scheduler, e.g. http://127.0.0.1:8082 "
                   "(default: a local scheduler in this process)")
    p.add_argument("--example-config", action="store_true", help="print a TOML file documenting every field, and exit")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("status", help="List the tasks of a run: done, pending, or failed with the last failure's reason.",
                       description="List every task of the run a TOML file describes that is not done (all of them "
                       "with --all), and for a failed one the error of its last failure. Reads the work folder only.",
                       formatter_class=fmt)
    p.add_argument("config", type=Path, help="the run's TOML file")
    p.add_argument("--all", action="store_true", help="list the done tasks too")
    p.set_defaults(func=cmd_status)

    from textmill.inference import server

    p = sub.add_parser("serve", help="Serve a checkpoint over HTTP with Megatron-LM's text generation API.",
                       description=server.__doc__, formatter_class=DocstringHelpFormatter)
    p.add_argument("--load", type=Path, required=True, help="checkpoint directory (its newest checkpoint, any layout)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 serves every interface)")
    p.add_argument("--port", type=int, default=5000, help="port (0: any free port, printed at start)")
    p.add_argument("--max-prompts", type=int, default=128, help="most prompts in one request")
    p.add_argument("--max-prompt-tokens", type=int, help="longest prompt in tokens (default: the model's positions)")
    p.add_argument("--max-tokens-to-generate", type=int, help="most tokens one request may ask for (default: the model's positions)")
    p.add_argument("--vocab-file", type=Path, help=tokenizer_files)
    p.add_argument("--merge-file", type=Path, help=tokenizer_files)
    p.add_argument("--device", default="auto", help="cuda, cpu, or auto")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast")
    p.add_argument("--verbose", action="store_true", help="log one line per request (method, path, status, seconds) to stderr")
    p.set_defaults(func=cmd_serve)

    from textmill.inference import client

    p = sub.add_parser("generate", help="Generate text from a checkpoint, through a server (--url) or locally (--load).",
                       description=client.__doc__, formatter_class=DocstringHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", help="a textmill or Megatron-LM server, e.g. http://127.0.0.1:5000")
    source.add_argument("--load", type=Path, help="checkpoint directory to generate from on this machine")
    p.add_argument("--prompt", action="append", help="a prompt (repeat for a batch); without it, ask in a loop")
    p.add_argument("--tokens-to-generate", type=int, default=64, help="tokens to generate per prompt (with --prompt)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature, in (0, 100]")
    p.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (0: all; 1: greedy)")
    p.add_argument("--top-p", type=float, default=0.0, help="sample from the smallest set of tokens with this much probability (0: off)")
    p.add_argument("--greedy", action="store_true", help="always take the most likely token (same as --top-k 1)")
    p.add_argument("--seed", type=int, help="random seed of the sampling (default: a fresh one each time)")
    p.add_argument("--stop", action="append", help="stop when the generated text contains this string (repeatable; --load only)")
    p.add_argument("--stop-on-eol", action="store_true", help="stop after the first newline")
    p.add_argument("--logprobs", action="store_true", help="also print each token's log-probability")
    p.add_argument("--no-kv-cache", dest="kv_cache", action="store_false",
                   help="recompute the whole prefix for every token (--load only; for comparison)")
    p.add_argument("--vocab-file", type=Path, help=tokenizer_files)
    p.add_argument("--merge-file", type=Path, help=tokenizer_files)
    p.add_argument("--device", default="auto", help="cuda, cpu, or auto (--load)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (--load)")
    p.set_defaults(func=cmd_generate)

    from textmill.demo.run import add_demo_parser
    from textmill.schedule import add_schedule_parser

    add_schedule_parser(sub)

    add_demo_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv[1:]  # the command's own arguments, for commands that relaunch themselves (train)
    try:
        summary = args.func(args)
        if summary:
            print(summary)
    except TextmillError as exc:
        print(f"textmill: error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, RunFailed) else 2
    except OSError as exc:
        if not is_disk_error(exc):
            raise
        print(f"textmill: error: {exc.filename or 'a file'}: {exc.strerror}; free space or fix the permissions, then "
              "run again (finished work is kept)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("textmill: interrupted; finished shards are kept, unfinished ones will be redone", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
