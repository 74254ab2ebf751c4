"""`textmill inspect PATH`: look at what a stage wrote (textmill.report.inspect)."""

from __future__ import annotations

from pathlib import Path

from textmill.cli.options import ArgumentDefaults, add_tokenizer_files
from textmill.errors import TextmillError


def cmd_inspect(args) -> str:
    from textmill.report.inspect import Selection, inspect
    from textmill.tokenizers.files import open_tokenizer
    from textmill.tokenizers.hf import check_tokenizer_choice

    if args.head < 0:
        raise TextmillError(f"--head must be 0 or more, not {args.head}")
    if (args.vocab_file is None) != (args.merge_file is None):
        raise TextmillError("--vocab-file and --merge-file go together")
    check_tokenizer_choice("HuggingFaceTokenizer" if args.tokenizer_model else "GPT2BPETokenizer", args.tokenizer_model,
                           args.vocab_file)
    tokenizer = open_tokenizer(args.vocab_file, args.merge_file, args.tokenizer_model)
    if args.ascending and not args.sort:
        raise TextmillError("--ascending orders what --sort names: give --sort FIELD")
    selection = Selection(1 if args.id or args.url else args.head, args.reason, args.id, args.url, args.sort,
                          args.ascending)
    return "\n".join(inspect(args.path, selection, tokenizer))


def add_parsers(sub) -> None:
    p = sub.add_parser("inspect", help="Show what a stage's output, rejects, manifest or token files hold.",
                       description="Show what a file textmill wrote holds: a stage's shard or rejects (Parquet), loose "
                       "JSON lines, a manifest, a stage's folder (each shard's counts), or Megatron token files "
                       "(PREFIX, PREFIX.bin or PREFIX.idx). Records are shown with their id, URL, title, reject "
                       "reason and the start of their text; a reject that names another document "
                       "(near_duplicate_of=<id>) is shown with that document's URL.", formatter_class=ArgumentDefaults)
    p.add_argument("path", type=Path, help="the file, folder or token-file prefix to look at")
    p.add_argument("--head", type=int, default=5, help="how many records (or token documents) to show")
    p.add_argument("--reason", help="only rejects with this reason (its name, e.g. near_duplicate_of, or the whole "
                   "reason, e.g. status=404)")
    p.add_argument("--id", help="only the record with this id (for token files: the document number)")
    p.add_argument("--url", help="only the record with this URL")
    p.add_argument("--sort", metavar="FIELD", help="show the records with the highest values of this numeric column "
                   "or metadata key first (e.g. classifier_score, which [classify] keeps with each document); records "
                   "without it are not shown")
    p.add_argument("--ascending", action="store_true", help="with --sort: the lowest values first")
    add_tokenizer_files(p, "decode token files' documents back to text with this tokenizer")
    p.add_argument("--tokenizer-model", type=Path, help="decode with this Hugging Face tokenizer folder instead (the "
                   "one `tokenize --tokenizer-model` encoded with, e.g. CKPT/tokenizer)")
    p.set_defaults(func=cmd_inspect)
