"""`textmill train | evaluate | export | import | checkpoint`: training a model and moving it between
formats and layouts."""

from __future__ import annotations

from pathlib import Path

from textmill.cli.options import ArgumentDefaults, Timer, add_tokenizer_files, check_checkpoint
from textmill.errors import TextmillError
from textmill.run_file import CORPUS_STAGES
from textmill.settings import add_arguments, from_namespace
from textmill.trainer.train_config import TrainConfig


def cmd_train(args) -> str:
    return train(from_namespace(TrainConfig, args))


def train(config: TrainConfig) -> str:
    """Train as `config` says; the summary line (on the rank that writes; "" on the others)."""
    from textmill.report.lines import train_line
    from textmill.trainer.train import run

    timer = Timer()
    result = run(config)
    return train_line(result, config.save, timer.seconds) if result else ""


def cmd_evaluate_lambada(args) -> str:
    check_checkpoint(args.load, args.vocab_file, args.merge_file)
    if not Path(args.valid_data).is_file():
        raise TextmillError(f"{args.valid_data}: no such file (--valid-data, a LAMBADA-format JSON-lines file)")
    from textmill.evaluate.lambada import evaluate_lambada
    from textmill.report.lines import lambada_lines
    from textmill.trainer.device import pick_device

    timer = Timer()
    r = evaluate_lambada(args.load, args.valid_data, args.strict_lambada, args.vocab_file, args.merge_file,
                         args.micro_batch_size, pick_device(args.device), args.bf16, args.output, progress=True)
    return "\n".join(lambada_lines(r, timer.seconds))


def cmd_export_hf(args) -> str:
    check_checkpoint(args.load, args.vocab_file, args.merge_file)
    from textmill.interop.hf import export_hf
    from textmill.report.lines import export_line

    timer = Timer()
    return export_line(export_hf(args.load, args.output, args.vocab_file, args.merge_file), timer.seconds)


def cmd_export_corpus(args) -> str:
    from textmill.report.lines import export_corpus_line
    from textmill.run_file import load_config
    from textmill.workflows.run_records import export_stage

    timer = Timer()
    load_config(args.config)  # a bad config is one error line
    return export_corpus_line(export_stage(args.config, args.stage, args.output), timer.seconds)


def cmd_export_megatron(args) -> str:
    from textmill.interop.megatron_export import export_megatron
    from textmill.report.lines import export_megatron_line

    timer = Timer()
    r = export_megatron(args.load, args.output, args.target_tensor_parallel_size, args.target_pipeline_parallel_size,
                        "legacy" if args.legacy_names else "core", args.ckpt_format)
    return export_megatron_line(r, timer.seconds)


def cmd_import_hf(args) -> str:
    from textmill.interop.hf import import_hf
    from textmill.report.lines import import_line

    timer = Timer()
    r = import_hf(args.folder, args.save, args.make_vocab_size_divisible_by, args.vocab_file, args.merge_file)
    return import_line(r, timer.seconds)


def cmd_import_megatron(args) -> str:
    from textmill.interop.megatron import import_megatron
    from textmill.report.lines import import_megatron_line

    timer = Timer()
    r = import_megatron(args.path, args.save, args.vocab_file, args.merge_file, args.num_attention_heads)
    return import_megatron_line(r, timer.seconds)


def cmd_checkpoint_convert(args) -> str:
    from textmill.interop.convert import convert_checkpoint
    from textmill.report.lines import convert_line

    r = convert_checkpoint(args.load, args.save, args.target_tensor_parallel_size, args.target_pipeline_parallel_size,
                           args.ckpt_format, args.argv[1:])
    return "" if r is None else convert_line(r)


def add_export_paths(p) -> None:
    p.add_argument("--load", type=Path, required=True, help="checkpoint directory (its newest checkpoint is exported)")
    p.add_argument("--output", type=Path, required=True, help="folder to write: a new or empty one, or an earlier export "
                   "(replaced whole); a folder holding other files is refused")


def add_target_layout(p) -> None:
    """The layout (Megatron's saver flags) a command writes its files for."""
    p.add_argument("--target-tensor-parallel-size", type=int, default=1, help="tensor-parallel size of the files written")
    p.add_argument("--target-pipeline-parallel-size", type=int, default=1, help="pipeline-parallel size of the files written")


def add_parsers(sub) -> None:
    fmt = ArgumentDefaults
    p = sub.add_parser("train", help="Train a GPT on .bin/.idx token files (Megatron's pretrain_gpt.py arguments).",
                       description="Train a GPT (GPT-2, or LLaMA, Qwen2, GPT-NeoX or GPT-J blocks) on Megatron "
                       ".bin/.idx datasets, with Megatron's data split, sample index, schedule and checkpoint layout.",
                       formatter_class=fmt)
    add_arguments(p, TrainConfig)
    p.set_defaults(func=cmd_train)

    saved_tokenizer = "the tokenizer to use (default: the copies the trainer keeps in LOAD/tokenizer/)"
    p = sub.add_parser("evaluate", help="Evaluate a checkpoint (LAMBADA, as Megatron's tasks/zeroshot_gpt).",
                       description="Evaluate a checkpoint.", formatter_class=fmt)
    tasks = p.add_subparsers(dest="task", required=True, metavar="TASK")
    p = tasks.add_parser("lambada", help="LAMBADA last-word accuracy and perplexity.", formatter_class=fmt,
                         description="LAMBADA last-word prediction as Megatron-LM's tasks/zeroshot_gpt scores it: greedy, "
                         "teacher-forced exact match of the target tokens; also the last word's perplexity. Prints "
                         "Megatron's result line and writes a JSON result.")
    p.add_argument("--load", type=Path, required=True, help="checkpoint directory (its newest checkpoint is used)")
    p.add_argument("--valid-data", type=Path, required=True,
                   help='LAMBADA JSON lines, one {"text": ...} per passage: lambada_test.jsonl, the file Megatron-LM\'s '
                        'README links (https://github.com/cybertronai/bflm/raw/master/lambada_test.jsonl; 5,153 '
                        'passages, sha256 4aa8d02cd17c719165fc8a7887fddd641f43fcafa4b1c806ca8abc31fabdb226)')
    p.add_argument("--strict-lambada", action="store_true",
                   help="target = the whole last word (default: the last BPE token, as Megatron's default)")
    add_tokenizer_files(p, saved_tokenizer)
    p.add_argument("--micro-batch-size", type=int, default=8, help="passages per forward pass")
    p.add_argument("--device", default="auto", help="cuda, cpu, or auto")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast")
    p.add_argument("--output", type=Path, help="result JSON (default: LOAD/lambada.json or LOAD/lambada-strict.json)")
    p.set_defaults(func=cmd_evaluate_lambada)

    p = sub.add_parser("export", help="Export a checkpoint to another format (Hugging Face, Megatron-LM), or a "
                       "run's corpus to one folder.", description="Export a checkpoint to another format, or a run's "
                       "corpus to one folder.", formatter_class=fmt)
    formats = p.add_subparsers(dest="format", required=True, metavar="FORMAT")
    p = formats.add_parser("hf", help="A Hugging Face transformers folder (GPT2LMHeadModel, LlamaForCausalLM, "
                           "MistralForCausalLM, Qwen2ForCausalLM, GPTNeoXForCausalLM or GPTJForCausalLM).",
                           formatter_class=fmt,
                           description="Write the newest checkpoint as a Hugging Face folder: config.json, "
                           "model.safetensors (fp32) and the tokenizer's files (GPT-2's vocab.json, merges.txt and "
                           "tokenizer config, or a Hugging Face tokenizer.json kept from an import), which "
                           "AutoModelForCausalLM / AutoTokenizer / pipeline('text-generation') load as they are.")
    add_export_paths(p)
    add_tokenizer_files(p, saved_tokenizer)
    p.set_defaults(func=cmd_export_hf)
    p = formats.add_parser("megatron", help="A Megatron-LM GPT checkpoint (GPT-2 blocks).",
                           formatter_class=fmt,
                           description="Write the newest checkpoint as a Megatron-LM GPT checkpoint (checkpoint version "
                           "3.0, with the args it checks on load), weights only: Megatron-LM loads it with --finetune, or "
                           "with --no-load-optim --no-load-rng. Checked against Megatron-core 0.16.1 (Megatron-LM "
                           "d98e8a64dd); GPT-2 blocks only.")
    add_export_paths(p)
    p.add_argument("--ckpt-format", choices=["torch_dist", "torch"], default="torch_dist",
                   help="torch_dist (Megatron-LM's default): the model whole in Megatron-core's distributed format, "
                   "which Megatron-LM cuts for any tensor/pipeline layout (keyed as for either --transformer-impl; "
                   "tested with local); torch: one model_optim_rng.pt per rank of --target-*-parallel-size, tensors "
                   "named for --transformer-impl local")
    add_target_layout(p)
    p.add_argument("--legacy-names", action="store_true",
                   help="with --ckpt-format torch: name the tensors as Megatron-LM's legacy GPT model does "
                   "(language_model.encoder...), for a Megatron-LM old enough to have it (today's has only "
                   "Megatron-core's GPTModel)")
    p.set_defaults(func=cmd_export_megatron)
    p = formats.add_parser("corpus", help="A finished stage of a run (default: its corpus) in one folder.",
                           formatter_class=fmt,
                           description="Gather the kept shards of a finished corpus stage of `textmill run` into one "
                           "folder (each unit's shard sits in a folder keyed by its own inputs): hard links where the "
                           "work folder shares the disk (the same files as the run's: editing one edits both, and "
                           "deleting the work folder keeps the export), else copies. "
                           "datasets.load_dataset('parquet', data_dir=OUTPUT) reads it as it is.")
    p.add_argument("config", type=Path, help="the run's TOML file")
    p.add_argument("--stage", choices=list(CORPUS_STAGES), help="the stage to export (default: the run's last, its corpus)")
    p.add_argument("--output", "-o", type=Path, required=True, help="the folder to write: a new or empty one, or an "
                   "earlier export (replaced whole); a folder holding other files, or holding or inside the run's "
                   "work folder, inputs or run file, is refused")
    p.set_defaults(func=cmd_export_corpus)

    p = sub.add_parser("import", help="Import a model from another format (Hugging Face, Megatron-LM).",
                       description="Import a model from another format.", formatter_class=fmt)
    formats = p.add_subparsers(dest="format", required=True, metavar="FORMAT")
    p = formats.add_parser("hf", help="A Hugging Face GPT-2, LLaMA, Mistral, Qwen2, GPT-NeoX or GPT-J folder into a "
                           "textmill checkpoint.",
                           formatter_class=fmt,
                           description="Turn a Hugging Face GPT-2, LLaMA (grouped-query attention and LLaMA 3.1's rope "
                           "scaling included), Mistral, Qwen2, GPT-NeoX or GPT-J folder into a textmill 'release' "
                           "checkpoint that evaluate, export and train --load (with --finetune --use-checkpoint-args) "
                           "accept. Its tokenizer comes along into SAVE/tokenizer/.")
    p.add_argument("folder", type=Path, help="folder with config.json and model.safetensors (or pytorch_model.bin)")
    p.add_argument("--save", type=Path, required=True, help="checkpoint directory to write")
    add_tokenizer_files(p, "the tokenizer to keep with the model (default: FOLDER/tokenizer.json, else FOLDER/vocab.json "
                        "and FOLDER/merges.txt)")
    p.add_argument("--make-vocab-size-divisible-by", type=int, default=128, help="pad the vocabulary as the trainer does")
    p.set_defaults(func=cmd_import_hf)
    p = formats.add_parser("megatron", help="A Megatron-LM GPT-2 checkpoint (NVIDIA's 345M release, or one saved in "
                           "--ckpt-format torch or torch_dist by any tensor/pipeline layout) into a textmill checkpoint.",
                           formatter_class=fmt,
                           description="Turn a Megatron-LM GPT checkpoint into a textmill 'release' checkpoint: "
                           "--ckpt-format torch (mp_rank_*/model_optim_rng.pt of its legacy model or of Megatron-core's "
                           "GPTModel, any checkpoint version, tensor-parallel shards joined, pipeline stages "
                           "concatenated) or torch_dist (Megatron-LM's default: .metadata, *.distcp and common.pt, "
                           "whole tensors). The files are read without running code from them (an allowlist of what "
                           "Megatron writes). GPT-2 blocks only; other blocks are refused.")
    p.add_argument("path", type=Path, help="the save directory (with latest_checkpointed_iteration.txt), or one "
                   "iter_N or release folder in it")
    p.add_argument("--save", type=Path, required=True, help="checkpoint directory to write")
    p.add_argument("--vocab-file", type=Path, help="GPT-2 BPE vocab.json the model was trained with (required)")
    p.add_argument("--merge-file", type=Path, help="GPT-2 BPE merges.txt the model was trained with (required)")
    p.add_argument("--num-attention-heads", type=int, help="heads, for a checkpoint without args (default: 16, as "
                   "NVIDIA's 345M release); a checkpoint's args take precedence")
    p.set_defaults(func=cmd_import_megatron)

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
    add_target_layout(p)
    p.add_argument("--ckpt-format", choices=["torch", "torch_dist"], default="torch_dist",
                   help="torch_dist: one shard file per rank of the layout; torch: one file (layout 1 x 1 only)")
    p.set_defaults(func=cmd_checkpoint_convert)
