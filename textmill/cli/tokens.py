"""`textmill tokenize | train-tokenizer | merge-datasets`: Megatron token files from documents."""

from __future__ import annotations

from pathlib import Path

from textmill.cli.options import ArgumentDefaults, Timer
from textmill.settings import add_arguments, from_namespace
from textmill.tokenizers.tokenize_config import TokenizeConfig


def cmd_tokenize(args) -> str:
    from textmill.pipeline.shards import list_shards
    from textmill.report.lines import tokenize_line, trained_tokenizer_line
    from textmill.tokenizers.preprocess import dataset_prefix, rejects_file, tokenize_files
    from textmill.tokenizers.train import train_bpe_on_files

    timer = Timer()
    config = from_namespace(TokenizeConfig, args)
    inputs = list_shards(args.inputs)
    lines = []
    tokenizer = config.given_tokenizer()
    if tokenizer is None:
        tokenizer = train_bpe_on_files(inputs, args.output_prefix, config)
        lines.append(trained_tokenizer_line(tokenizer))
    m = tokenize_files(inputs, args.output_prefix, tokenizer, config)
    datasets = [str(dataset_prefix(args.output_prefix, key)) for key in m["counts"]["tokens"]]
    return "\n".join([*lines, tokenize_line(m, datasets, rejects_file(args.output_prefix), timer.seconds)])


def cmd_train_tokenizer(args) -> str:
    from textmill.pipeline.shards import list_shards
    from textmill.report.lines import seconds_tag, trained_tokenizer_line
    from textmill.tokenizers.train import train_bpe_on_files

    timer = Timer()
    config = from_namespace(TokenizeConfig, args)
    tokenizer = train_bpe_on_files(list_shards(args.inputs), args.output_prefix, config)
    return f"{trained_tokenizer_line(tokenizer)} {seconds_tag(timer.seconds)}"


def cmd_merge_datasets(args) -> str:
    from textmill.megatron.indexed import merge_directory
    from textmill.report.lines import merged_line

    timer = Timer()
    merged, parts = merge_directory(Path(args.input), Path(args.output_prefix))
    return merged_line(merged.num_documents, int(merged.lengths.sum()), parts, args.output_prefix, timer.seconds)


def add_parsers(sub) -> None:
    fmt = ArgumentDefaults
    texts = ("documents: loose JSON lines (Megatron's input format) or Parquet shards from `textmill shuffle`, "
             "or directories of them; read in the order given, files of a directory in name order")
    p = sub.add_parser("tokenize", help="GPT-2 BPE-encode documents into Megatron .bin/.idx files (tools/preprocess_data.py).",
                       description="GPT-2 BPE-encode documents into Megatron .bin/.idx files, as Megatron-LM's "
                       "tools/preprocess_data.py does. Without --vocab-file/--merge-file a byte-level BPE is first "
                       "trained on the input and saved as PREFIX-vocab.json and PREFIX-merges.txt. With "
                       "--tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR, a model's own tokenizer (a local "
                       "Hugging Face folder) encodes instead, as transformers does.", formatter_class=fmt)
    p.add_argument("--input", dest="inputs", nargs="+", required=True, metavar="PATH", help=texts)
    p.add_argument("--output-prefix", required=True,
                   help="writes PREFIX_KEY_document.bin/.idx per JSON key, PREFIX.rejects.jsonl and PREFIX.manifest.json")
    add_arguments(p, TokenizeConfig)
    p.set_defaults(func=cmd_tokenize)

    p = sub.add_parser("train-tokenizer", help="Train a byte-level BPE and save it as GPT-2 vocab.json + merges.txt.",
                       description="Train a byte-level BPE on documents and save it in GPT-2's two-file format, "
                       "which Megatron-LM (--vocab-file/--merge-file), transformers and textmill load.", formatter_class=fmt)
    p.add_argument("--input", dest="inputs", nargs="+", required=True, metavar="PATH", help=texts)
    p.add_argument("--output-prefix", required=True, help="writes PREFIX-vocab.json and PREFIX-merges.txt")
    add_arguments(p, TokenizeConfig, skip=("vocab_file", "merge_file", "append_eod", "workers", "tokenizer_type",
                                           "tokenizer_model"),
                  help_for={"json_keys": "fields whose text is learned from"})
    p.set_defaults(func=cmd_train_tokenizer)

    p = sub.add_parser("merge-datasets", help="Concatenate the .bin/.idx datasets of a directory (tools/merge_datasets.py).",
                       description="Concatenate every .bin/.idx dataset in a directory, in sorted name order, into "
                       "one dataset, as Megatron-LM's tools/merge_datasets.py does.", formatter_class=fmt)
    p.add_argument("--input", required=True, help="directory holding PREFIX.bin/PREFIX.idx pairs and nothing else of that kind")
    p.add_argument("--output-prefix", required=True, help="writes PREFIX.bin and PREFIX.idx")
    p.set_defaults(func=cmd_merge_datasets)
