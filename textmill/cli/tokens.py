"""`textmill tokenize | train-tokenizer | merge-datasets`: Megatron token files from documents."""

from __future__ import annotations

import argparse
from pathlib import Path

from textmill.cli.options import ArgumentDefaults, Timer, add_tokenizer_files, gpt2_tokenizer


def cmd_tokenize(args) -> str:
    from textmill.pipeline.shards import list_shards
    from textmill.report import tokenize_line, trained_tokenizer_line
    from textmill.tokenizers.preprocess import TokenizeConfig, dataset_prefix, rejects_file, tokenize_files
    from textmill.tokenizers.train import train_bpe_on_files

    timer = Timer()
    inputs = list_shards(args.inputs)
    lines = []
    tokenizer = gpt2_tokenizer(args)
    if tokenizer is None:
        tokenizer = train_bpe_on_files(inputs, tuple(args.json_keys), args.vocab_size, args.output_prefix, args.min_frequency)
        lines.append(trained_tokenizer_line(tokenizer))
    cfg = TokenizeConfig(tuple(args.json_keys), args.append_eod, args.workers)
    m = tokenize_files(inputs, args.output_prefix, tokenizer, cfg)
    datasets = [str(dataset_prefix(args.output_prefix, key)) for key in m["counts"]["tokens"]]
    return "\n".join([*lines, tokenize_line(m, datasets, rejects_file(args.output_prefix), timer.seconds)])


def cmd_train_tokenizer(args) -> str:
    from textmill.pipeline.shards import list_shards
    from textmill.report import seconds_tag, trained_tokenizer_line
    from textmill.tokenizers.train import train_bpe_on_files

    timer = Timer()
    tokenizer = train_bpe_on_files(list_shards(args.inputs), tuple(args.json_keys), args.vocab_size, args.output_prefix,
                                   args.min_frequency)
    return f"{trained_tokenizer_line(tokenizer)} {seconds_tag(timer.seconds)}"


def cmd_merge_datasets(args) -> str:
    from textmill.megatron.indexed import merge_directory
    from textmill.report import merged_line

    timer = Timer()
    merged, parts = merge_directory(Path(args.input), Path(args.output_prefix))
    return merged_line(merged.num_documents, int(merged.lengths.sum()), parts, args.output_prefix, timer.seconds)


def add_parsers(sub) -> None:
    fmt = ArgumentDefaults

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
    add_tokenizer_files(p, "encode with these (e.g. gpt2-vocab.json, gpt2-merges.txt); without them a BPE is trained")
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
