"""The trainer's settings: TrainConfig (`textmill train`'s options, Megatron's flag names, and the table file
a training process is started with), the model's config made from them (gpt_config.GPTConfig), and the
checks that need neither data nor a device. Nothing here imports torch, so the
command line and `textmill run`'s reading of [train] cost no more than argparse."""

from __future__ import annotations

import json
import typing
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Literal

from textmill.errors import TextmillError
from textmill.settings import SEED_MAX, Settings, from_table, setting, settings_of, to_argv, to_table
from textmill.tokenizers.hf import check_tokenizer_choice
from textmill.trainer.gpt_config import PRESETS, GPTConfig
from textmill.trainer.parallel.dims import ParallelDims

ModelPreset = Literal["tiny", "gpt2-124m", "gpt2-345m", "gpt2-774m", "gpt2-1.5b"]
assert set(typing.get_args(ModelPreset)) == set(PRESETS)

MODEL = "model (Megatron names; a preset fills whatever is not given)"
DATA = "data"
TRAINING = "training"
PARALLEL = "parallelism (launch with torchrun, or --nproc-per-node)"
CHECKPOINTS = "checkpoints and logging"


@dataclass(frozen=True, kw_only=True)
class TrainConfig(Settings):
    """`textmill train`'s settings, named as Megatron's pretrain_gpt.py names its flags. The command's options
    and the run's [train] table are generated from these fields (textmill.settings)."""

    # model
    model_preset: ModelPreset = setting("tiny", "named size: GPT-2 124M/345M/774M/1.5B, or tiny for CPU runs", group=MODEL)
    num_layers: int | None = setting(None, "transformer layers", least=1, group=MODEL)
    hidden_size: int | None = setting(None, "model width h", least=1, group=MODEL)
    num_attention_heads: int | None = setting(None, "attention heads (must divide the hidden size)", least=1, group=MODEL)
    ffn_hidden_size: int | None = setting(None, "MLP width (default 4h; SwiGLU: about 8h/3)", least=1, group=MODEL)
    max_position_embeddings: int | None = setting(None, "positions the model has (learned table or RoPE range)", least=1,
                                                  group=MODEL)
    position_embedding_type: Literal["learned_absolute", "rope"] = setting(
        "learned_absolute", "learned positions (GPT-2) or rotary embeddings (LLaMA)", group=MODEL)
    rotary_base: float = setting(10000.0, "RoPE base theta", above=0, group=MODEL)
    rotary_percent: float = setting(1.0, "the share of each head's dimensions that RoPE turns (GPT-NeoX: 0.25); the "
                                    "rest pass unturned", above=0, most=1, group=MODEL)
    rotary_interleaved: bool = setting(False, "RoPE turns neighbouring dimensions (0, 1), (2, 3), ... together "
                                       "(GPT-J) instead of dimension i with i + half (LLaMA, GPT-NeoX)", group=MODEL)
    use_parallel_residual: bool = setting(False, "attention and MLP both read the block's input, one residual add "
                                          "(GPT-NeoX, GPT-J)", group=MODEL)
    shared_input_norm: bool = setting(False, "with --use-parallel-residual: attention and MLP read one norm of the "
                                      "block's input (GPT-J) instead of a norm each (GPT-NeoX)", group=MODEL)
    use_rope_scaling: bool = setting(False, "LLaMA 3.1's rope scaling (low frequencies divided by "
                                     "--rope-scaling-factor, original context 8192 positions)", group=MODEL)
    rope_scaling_factor: float = setting(8.0, "the factor of --use-rope-scaling", above=0, group=MODEL)
    group_query_attention: bool = setting(False, "grouped-query attention: --num-query-groups key/value heads, each "
                                          "shared by heads / groups query heads (1 group: multi-query attention)",
                                          group=MODEL)
    num_query_groups: int = setting(1, "key/value heads with --group-query-attention (must divide the attention "
                                    "heads; with --tensor-model-parallel-size TP, G divisible by TP gives each rank "
                                    "whole groups, TP divisible by G replicates each group's keys and values on its "
                                    "TP / G ranks)", least=1, group=MODEL)
    normalization: Literal["LayerNorm", "RMSNorm"] = setting("LayerNorm", "norm layers", group=MODEL)
    norm_epsilon: float = setting(1e-5, "epsilon of the norm layers", above=0, group=MODEL)
    swiglu: bool = setting(False, "SwiGLU MLP instead of GELU (LLaMA)", group=MODEL)
    openai_gelu: bool = setting(False, "tanh-approximated GELU, as OpenAI's GPT-2 (default: exact GELU)", group=MODEL)
    untie_embeddings_and_output_weights: bool = setting(False, "separate output layer (LLaMA)", group=MODEL)
    disable_bias_linear: bool = setting(False, "no biases in linear layers and norms (LLaMA)", group=MODEL)
    disable_attention_bias: bool = setting(False, "no biases in attention's projections; the MLP and norms keep "
                                           "theirs (GPT-J)", group=MODEL)
    add_qkv_bias: bool = setting(False, "a bias on the query, key and value projection even where the others have "
                                 "none (Qwen2, with --disable-bias-linear)", group=MODEL)
    output_layer_bias: bool = setting(False, "a bias on the untied output layer (GPT-J; needs "
                                      "--untie-embeddings-and-output-weights)", group=MODEL)
    hidden_dropout: float = setting(0.1, "dropout on embeddings and residual branches", least=0, most=1, group=MODEL)
    attention_dropout: float = setting(0.1, "dropout on attention probabilities", least=0, most=1, group=MODEL)
    init_method_std: float = setting(0.02, "standard deviation of the weight init", above=0, group=MODEL)
    make_vocab_size_divisible_by: int = setting(128, "pad the vocabulary to a multiple of this", least=1, group=MODEL)
    # data
    data_path: tuple[str, ...] = setting(help="dataset prefixes (PREFIX.bin/.idx), optionally weighted: 0.3 web 0.7 books",
                                         nargs="+", group=DATA)
    split: str = setting("969,30,1", "train,valid,test proportions of each dataset's documents", group=DATA)
    seq_length: int | None = setting(None, "tokens per sample (default: the position count)", least=1, group=DATA)
    vocab_file: Path | None = setting(None, "GPT-2 vocab.json the data was tokenized with (gives the vocabulary size)",
                                      group=DATA)
    merge_file: Path | None = setting(None, "GPT-2 merges.txt, kept with the checkpoints for evaluation and export",
                                      group=DATA)
    vocab_size: int | None = setting(None, "vocabulary size when no --vocab-file is given", least=1, group=DATA)
    no_index_cache: bool = setting(False, "rebuild the sample index instead of caching it beside the data", group=DATA)
    tokenizer_type: Literal["GPT2BPETokenizer", "HuggingFaceTokenizer"] = setting(
        "GPT2BPETokenizer", "Megatron's name of the tokenizer the data was made with: GPT2BPETokenizer (--vocab-file "
        "and --merge-file) or HuggingFaceTokenizer (--tokenizer-model)", group=DATA)
    tokenizer_model: Path | None = setting(None, "with --tokenizer-type HuggingFaceTokenizer: the local Hugging Face "
                                           "tokenizer folder the data was tokenized with (gives the vocabulary size; "
                                           "its files are kept with the checkpoints)", group=DATA)
    data_impl: Literal["mmap"] = setting("mmap", "Megatron's older flag for the data format: textmill reads its mmap "
                                         ".bin/.idx files", group=DATA)
    # training
    micro_batch_size: int = setting(4, "sequences per forward/backward pass", least=1, group=TRAINING)
    global_batch_size: int = setting(8, "sequences per optimizer step (gradient accumulation)", least=1, group=TRAINING)
    rampup_batch_size: tuple[int, ...] = setting((), "Megatron's START INCREMENT SAMPLES batch-size ramp: not "
                                                 "supported (textmill trains at --global-batch-size from the start)",
                                                 nargs="+", group=TRAINING)
    train_iters: int | None = setting(None, "optimizer steps to train for (or give --train-samples)", least=1, example=300,
                                      group=TRAINING)
    train_samples: int | None = setting(None, "sequences to train on, as Megatron's GPT-3 scripts give it: "
                                        "--train-iters is this / --global-batch-size", least=1, group=TRAINING)
    lr: float = setting(6e-4, "peak learning rate", least=0, group=TRAINING)
    min_lr: float = setting(0.0, "learning rate at the end of the decay", least=0, group=TRAINING)
    lr_decay_style: Literal["cosine", "linear", "constant"] = setting("cosine", "decay after warmup", group=TRAINING)
    lr_decay_iters: int | None = setting(None, "iterations of warmup + decay (default: --train-iters)", least=1,
                                         group=TRAINING)
    lr_decay_samples: int | None = setting(None, "--lr-decay-iters in sequences (divided by --global-batch-size, "
                                           "rounded)", least=1, group=TRAINING)
    lr_warmup_iters: int = setting(0, "iterations of linear warmup from 0", least=0, group=TRAINING)
    lr_warmup_samples: int | None = setting(None, "--lr-warmup-iters in sequences (divided by --global-batch-size, "
                                            "rounded)", least=0, group=TRAINING)
    lr_warmup_fraction: float | None = setting(None, "warmup as a fraction of --lr-decay-iters (overrides "
                                               "--lr-warmup-iters)", least=0, most=1, group=TRAINING)
    weight_decay: float = setting(0.01, "AdamW weight decay (not on biases and norms)", least=0, group=TRAINING)
    adam_beta1: float = setting(0.9, "AdamW beta1", least=0, most=1, group=TRAINING)
    adam_beta2: float = setting(0.999, "AdamW beta2", least=0, most=1, group=TRAINING)
    adam_eps: float = setting(1e-8, "AdamW epsilon", above=0, group=TRAINING)
    clip_grad: float = setting(1.0, "clip the global gradient norm to this (0: no clipping)", least=0, group=TRAINING)
    seed: int = setting(1234, "seed of the weights, dropout and data order", least=0, most=SEED_MAX, group=TRAINING)
    device: str = setting("auto", "cuda, cpu, or auto (cuda when available)", group=TRAINING)
    cpu_threads: int | None = setting(None, "threads each process computes with on the CPU (default: torch's, one per "
                                      "core; under torchrun with several processes, 1). On a busy or shared machine "
                                      "fewer than the cores is often much faster", least=1, group=TRAINING, keyed=False)
    bf16: bool = setting(False, "bf16 autocast (fp32 weights and optimizer)", group=TRAINING)
    fp16: bool = setting(False, "fp16 autocast with dynamic loss scaling", group=TRAINING)
    no_tf32: bool = setting(False, "on NVIDIA GPUs, keep fp32 matrix products in full fp32: by default they run on "
                            "TF32 tensor cores (torch.set_float32_matmul_precision('high'), about 7x the fp32 peak "
                            "on an H100; torch itself defaults to full fp32)", group=TRAINING)
    initial_loss_scale: float = setting(2.0**32, "fp16: starting loss scale", above=0, group=TRAINING)
    loss_scale_window: int = setting(1000, "fp16: clean steps before the scale doubles", least=1, group=TRAINING)
    # parallelism
    nproc_per_node: int = setting(1, "processes on this machine (more than 1: started through torchrun)", least=1,
                                  group=PARALLEL)
    tensor_model_parallel_size: int = setting(1, "split each layer's matrices (and the vocabulary) over this many ranks; "
                                              "must divide the heads", least=1, group=PARALLEL)
    sequence_parallel: bool = setting(False, "with tensor parallelism: also split norms, dropout and residuals along the "
                                      "sequence", group=PARALLEL)
    pipeline_model_parallel_size: int = setting(1, "cut the layers into this many pipeline stages on different ranks "
                                                "(1F1B schedule)", least=1, group=PARALLEL)
    num_layers_per_virtual_pipeline_stage: int | None = setting(
        None, "interleaved schedule: stages of this many layers, several per pipeline rank", least=1, group=PARALLEL)
    use_distributed_optimizer: bool = setting(
        False, "shard optimizer state, gradients and parameters over data-parallel ranks (FSDP2, ZeRO-style); always "
        "so when data and tensor parallelism are combined", group=PARALLEL)
    overlap_grad_reduce: bool = setting(
        True, "reduce gradients in buckets while the backward pass runs (DDP); --no-overlap-grad-reduce reduces them in "
        "one piece after it. FSDP2 always reduce-scatters per layer during backward", group=PARALLEL)
    recompute_activations: bool = setting(False, "selective activation recomputation (same as --recompute-granularity "
                                          "selective)", group=PARALLEL)
    checkpoint_activations: bool = setting(False, "Megatron's older name for --recompute-granularity full", group=PARALLEL)
    use_flash_attn: bool = setting(False, "accepted for Megatron's scripts: attention always runs through torch's "
                                   "scaled_dot_product_attention, which takes a flash kernel where the GPU and dtype "
                                   "allow it", group=PARALLEL)
    distributed_backend: Literal["nccl", "gloo"] | None = setting(
        None, "accepted for Megatron's scripts: textmill uses NCCL on GPUs and gloo on CPUs", group=PARALLEL)
    recompute_granularity: Literal["full", "selective"] | None = setting(
        None, "recompute activations in the backward pass to save memory: full = whole layers, selective = the "
        "attention core", group=PARALLEL)
    compile: bool = setting(False, "compile each transformer block with torch.compile (inductor) on any device (on "
                            "NVIDIA GPUs it is the default): faster steps after a one-off compilation at the first "
                            "step; falls back to eager blocks, with one warning, where inductor cannot run (no C "
                            "compiler on a CPU, no Triton on a GPU)", group=PARALLEL)
    no_compile: bool = setting(False, "eager blocks, on GPUs too (where --compile is the default)", group=PARALLEL)
    cpu_offload_activations: bool = setting(
        False, "keep the activations the backward pass needs in pinned host memory instead of GPU memory, copied "
        "there on a CUDA stream of their own while the next layer computes: frees GPU memory that grows with batch x "
        "sequence x layers, at the cost of copying them over PCIe and back each step; combines with recomputation "
        "(then only the recomputed blocks' inputs move). On a CPU it changes nothing", group=PARALLEL)
    distributed_timeout_minutes: float = setting(10.0, "a collective waiting longer than this (a lost peer) fails the "
                                                 "run instead of hanging", above=0, group=PARALLEL, keyed=False)
    # checkpoints and logging
    save: Path | None = setting(None, "checkpoint directory (Megatron layout)", group=CHECKPOINTS)
    load: Path | None = setting(None, "resume from the newest checkpoint here (none there: start fresh)", group=CHECKPOINTS)
    save_interval: int | None = setting(None, "save every N iterations (and always at the end)", least=1,
                                        group=CHECKPOINTS, keyed=False)
    ckpt_format: Literal["torch", "torch_dist"] | None = setting(
        None, "one file (default for one process) or torch.distributed.checkpoint shards written by every rank "
        "(default for several); either loads into any layout", group=CHECKPOINTS)
    async_save: bool = setting(False, "write checkpoints in the background (torch_dist): each rank copies its "
                               "tensors to host memory and trains on while they are written; the tracker names the "
                               "checkpoint only once every rank has written it", group=CHECKPOINTS, keyed=False)
    no_load_optim: bool = setting(False, "with --load: weights only, fresh optimizer", group=CHECKPOINTS)
    no_load_rng: bool = setting(False, "with --load: do not restore the random state", group=CHECKPOINTS)
    finetune: bool = setting(False, "with --load: weights only, start at iteration 0", group=CHECKPOINTS)
    use_checkpoint_args: bool = setting(False, "with --load: the model's shape from the checkpoint there (layers, "
                                        "widths, heads and query groups, positions, blocks, vocabulary), e.g. to "
                                        "fine-tune an imported model without repeating it in flags", group=CHECKPOINTS)
    exit_interval: int | None = setting(None, "save and stop once the iteration is a multiple of N (scheduled jobs)",
                                        least=1, group=CHECKPOINTS)
    log_interval: int = setting(10, "log every N iterations", least=1, group=CHECKPOINTS, keyed=False)
    eval_interval: int = setting(100, "validation loss every N iterations", least=1, group=CHECKPOINTS, keyed=False)
    eval_iters: int = setting(10, "global batches of the validation split per evaluation", least=0, group=CHECKPOINTS)
    tensorboard_dir: Path | None = setting(None, "write TensorBoard scalars here", group=CHECKPOINTS, keyed=False)
    wandb_project: str | None = setting(None, "log to this Weights & Biases project (needs wandb: pip install "
                                        "'textmill[wandb]'; WANDB_MODE=offline keeps the run on disk)",
                                        group=CHECKPOINTS, keyed=False)
    wandb_exp_name: str | None = setting(None, "the Weights & Biases run's name", group=CHECKPOINTS, keyed=False)
    wandb_save_dir: Path | None = setting(None, "where wandb keeps its files (default: SAVE/wandb)", group=CHECKPOINTS,
                                          keyed=False)
    peak_tflops: float | None = setting(None, "the device's peak TFLOP/s for MFU, in the precision the run computes in (default: "
                                        "NVIDIA's dense figure for known GPUs: 16-bit tensor cores under --bf16 or "
                                        "--fp16, TF32 or plain fp32 otherwise; CPU: not reported)", above=0,
                                        group=CHECKPOINTS, keyed=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bf16 and self.fp16:
            raise TextmillError("--bf16 and --fp16 exclude each other")
        if self.compile and self.no_compile:
            raise TextmillError("--compile and --no-compile exclude each other")
        if self.async_save and self.ckpt_format == "torch":
            raise TextmillError("--async-save writes torch_dist shards; --ckpt-format torch is one synchronous file")
        if self.rampup_batch_size:
            raise TextmillError("--rampup-batch-size is not supported: textmill trains at --global-batch-size from the "
                                "first step; drop the flag (the run then takes --train-samples at that batch size)")
        self.samples_as_iterations()
        check_tokenizer_choice(self.tokenizer_type, self.tokenizer_model, self.vocab_file)
        if self.checkpoint_activations:  # the newer spelling, so that the config reads one way
            if self.recompute_granularity == "selective":
                raise TextmillError("--checkpoint-activations (full recomputation) and --recompute-granularity selective "
                                    "exclude each other")
            object.__setattr__(self, "recompute_granularity", "full")
            object.__setattr__(self, "checkpoint_activations", False)

    def compiles_on(self, device_type: str) -> bool:
        """Whether the blocks are compiled on a device of this type ("cuda", "cpu"): on NVIDIA GPUs unless
        --no-compile, elsewhere with --compile."""
        return self.compile or (device_type == "cuda" and not self.no_compile)

    def samples_as_iterations(self) -> None:
        """Megatron's sample-based schedule in iterations of --global-batch-size sequences (a frozen config, so
        set once here): --train-samples, --lr-decay-samples and --lr-warmup-samples become their --*-iters."""
        pairs = (("train_samples", "train_iters"), ("lr_decay_samples", "lr_decay_iters"),
                 ("lr_warmup_samples", "lr_warmup_iters"))
        for samples, iters in pairs:
            value = getattr(self, samples)
            if value is None:
                continue
            if getattr(self, iters) not in (None, 0):
                raise TextmillError(f"--{samples.replace('_', '-')} and --{iters.replace('_', '-')} exclude each other")
            count = value // self.global_batch_size if samples == "train_samples" else round(value / self.global_batch_size)
            object.__setattr__(self, iters, count)
            object.__setattr__(self, samples, None)
        if self.train_iters is None or self.train_iters < 1:
            raise TextmillError("needs train_iters (--train-iters), or train_samples (--train-samples) of at least "
                                "global_batch_size")

    @property
    def recompute(self) -> str | None:
        """The activation recomputation asked for: "full", "selective" or None."""
        return self.recompute_granularity or ("selective" if self.recompute_activations else None)

    def to_dict(self) -> dict:
        """The settings as JSON values (what a checkpoint records of the run that wrote it)."""
        return {k: str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v
                for k, v in settings_of(self).items()}

    def write(self, path: Path) -> Path:
        """The settings as a table file (JSON), what a trainer process reads (`read`): how they cross from
        `textmill run` to the trainer and from torchrun's launcher to its workers, typed, not as options."""
        from textmill.io.files import write_json

        write_json(to_table(self), path)
        return path

    @staticmethod
    def read(path: Path) -> TrainConfig:
        """The settings `write` wrote, checked again as any table is."""
        try:
            table = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TextmillError(f"{path}: not a trainer settings file ({exc})") from None
        return from_table(TrainConfig, "train", table, Path(path).parent)[0]

    def to_argv(self) -> list[str]:
        """The command-line options that give this config (those that differ from the defaults): the
        `textmill train` command a person would type for it."""
        changed = {f.name: getattr(self, f.name) for f in fields(self)
                   if f.default is MISSING or getattr(self, f.name) != f.default}
        return to_argv(TrainConfig, {k: v for k, v in changed.items() if v is not None})


def parallel_dims(config: TrainConfig, world: int) -> ParallelDims:
    virtual = 1
    if config.num_layers_per_virtual_pipeline_stage:
        if config.pipeline_model_parallel_size < 2:
            raise TextmillError("--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size of 2 or more")
        layers = config.num_layers or PRESETS[config.model_preset]["num_layers"]
        per_rank = layers // config.pipeline_model_parallel_size
        if layers % config.pipeline_model_parallel_size or per_rank % config.num_layers_per_virtual_pipeline_stage:
            raise TextmillError(f"--num-layers {layers} is not divisible by --pipeline-model-parallel-size "
                                f"{config.pipeline_model_parallel_size} x --num-layers-per-virtual-pipeline-stage "
                                f"{config.num_layers_per_virtual_pipeline_stage}")
        virtual = per_rank // config.num_layers_per_virtual_pipeline_stage
    if config.sequence_parallel and config.tensor_model_parallel_size < 2:
        raise TextmillError("--sequence-parallel needs --tensor-model-parallel-size of 2 or more")
    return ParallelDims(world, config.tensor_model_parallel_size, config.pipeline_model_parallel_size, virtual)


def model_config(config: TrainConfig, vocab_size: int) -> GPTConfig:
    from textmill.tokenizers.gpt2 import padded_vocab_size  # numpy and regex: not for building the command line

    sizes = dict(PRESETS[config.model_preset])
    for name in ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"):
        if getattr(config, name) is not None:
            sizes[name] = getattr(config, name)
    if sizes["hidden_size"] % sizes["num_attention_heads"]:
        raise TextmillError(f"--hidden-size {sizes['hidden_size']} is not divisible by --num-attention-heads "
                            f"{sizes['num_attention_heads']}")
    return GPTConfig(
        vocab_size=padded_vocab_size(vocab_size, config.make_vocab_size_divisible_by),
        ffn_hidden_size=config.ffn_hidden_size,
        position_embedding="rope" if config.position_embedding_type == "rope" else "learned",
        rope_theta=config.rotary_base,
        rotary_percent=config.rotary_percent,
        rotary_interleaved=config.rotary_interleaved,
        parallel_residual=config.use_parallel_residual,
        shared_input_norm=config.shared_input_norm,
        rope_scaling="llama3" if config.use_rope_scaling else "none",
        rope_scaling_factor=config.rope_scaling_factor,
        num_query_groups=config.num_query_groups if config.group_query_attention else None,
        normalization="rmsnorm" if config.normalization == "RMSNorm" else "layernorm",
        norm_epsilon=config.norm_epsilon,
        activation="swiglu" if config.swiglu else "gelu_tanh" if config.openai_gelu else "gelu",
        tie_embeddings=not config.untie_embeddings_and_output_weights,
        bias=not config.disable_bias_linear,
        attention_bias=not (config.disable_bias_linear or config.disable_attention_bias),
        qkv_bias=True if config.add_qkv_bias else None,
        output_bias=config.output_layer_bias,
        hidden_dropout=config.hidden_dropout,
        attention_dropout=config.attention_dropout,
        init_std=config.init_method_std,
        **sizes,
    )


def unpadded_vocab_size(config: TrainConfig) -> int:
    if config.tokenizer_model:
        from textmill.tokenizers.hf import HFTokenizer

        return HFTokenizer(config.tokenizer_model).vocab_size
    if config.vocab_file:
        try:
            return len(json.loads(Path(config.vocab_file).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise TextmillError(f"--vocab-file {config.vocab_file}: {exc}") from None
    if config.vocab_size:
        return config.vocab_size
    raise TextmillError("give --vocab-file (and --merge-file) or --vocab-size")


def check_vocabulary(meta: dict, data_tokens: int, load: Path) -> None:
    """One line naming both sizes when the token files' tokenizer is not the model's (a checkpoint's
    "tokenizer_vocab_size", which may be smaller than its "vocab_size": GPT-J has 50400 rows for GPT-2's 50257
    tokens)."""
    model_tokens = meta.get("tokenizer_vocab_size", meta.get("vocab_size"))
    if model_tokens is not None and model_tokens != data_tokens:
        raise TextmillError(f"{load}: the model's vocabulary has {model_tokens} tokens, the tokenizer of the token "
                            f"files {data_tokens}; tokenize with the model's own tokenizer (kept in {load}/tokenizer)")


def check_config(config: TrainConfig, world: int, vocab_size: int,
                 model: GPTConfig | None = None) -> tuple[GPTConfig, ParallelDims, int]:
    """The checks that need neither data nor a device, so a bad setting is refused before any work (also
    when `textmill run` reads [train]): the model config (`model`, else the one the settings describe), the
    parallel layout and the sequence length."""
    if config.fp16 and (config.use_distributed_optimizer or config.tensor_model_parallel_size > 1
                        or config.pipeline_model_parallel_size > 1):
        raise TextmillError("--fp16 is supported with plain data parallelism only (its overflow check is per rank); use --bf16")
    model = model or model_config(config, vocab_size)
    dims = parallel_dims(config, world)
    dims.check(model, config.global_batch_size, config.micro_batch_size)
    seq_len = config.seq_length or model.max_position_embeddings
    if seq_len > model.max_position_embeddings:
        raise TextmillError(f"--seq-length {seq_len} is longer than --max-position-embeddings {model.max_position_embeddings}")
    return model, dims, seq_len
