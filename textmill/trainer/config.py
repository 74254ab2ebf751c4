"""The trainer's settings: `textmill train`'s options (Megatron's flag names), the named model sizes, the
model's config, and the checks that need neither data nor a device. Nothing here imports torch, so the
command line and `textmill run`'s reading of [train] cost no more than argparse."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from textmill.errors import TextmillError
from textmill.tokenizers.gpt2 import padded_vocab_size
from textmill.trainer.parallel.dims import ParallelDims

# Named sizes: GPT-2's four (Radford et al. 2019, as Megatron configures them) and one for CPU runs.
PRESETS = {
    "tiny": dict(num_layers=2, hidden_size=64, num_attention_heads=4, max_position_embeddings=256),
    "gpt2-124m": dict(num_layers=12, hidden_size=768, num_attention_heads=12, max_position_embeddings=1024),
    "gpt2-345m": dict(num_layers=24, hidden_size=1024, num_attention_heads=16, max_position_embeddings=1024),
    "gpt2-774m": dict(num_layers=36, hidden_size=1280, num_attention_heads=20, max_position_embeddings=1024),
    "gpt2-1.5b": dict(num_layers=48, hidden_size=1600, num_attention_heads=25, max_position_embeddings=1024),
}


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model (Megatron names; a preset fills whatever is not given)")
    g.add_argument("--model-preset", choices=sorted(PRESETS), default="tiny",
                   help="named size: GPT-2 124M/345M/774M/1.5B, or tiny for CPU runs")
    g.add_argument("--num-layers", type=int, help="transformer layers")
    g.add_argument("--hidden-size", type=int, help="model width h")
    g.add_argument("--num-attention-heads", type=int, help="attention heads (must divide the hidden size)")
    g.add_argument("--ffn-hidden-size", type=int, help="MLP width (default 4h; SwiGLU: about 8h/3)")
    g.add_argument("--max-position-embeddings", type=int, help="positions the model has (learned table or RoPE range)")
    g.add_argument("--position-embedding-type", choices=["learned_absolute", "rope"], default="learned_absolute",
                   help="learned positions (GPT-2) or rotary embeddings (LLaMA)")
    g.add_argument("--rotary-base", type=float, default=10000.0, help="RoPE base theta")
    g.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"], default="LayerNorm", help="norm layers")
    g.add_argument("--norm-epsilon", type=float, default=1e-5, help="epsilon of the norm layers")
    g.add_argument("--swiglu", action="store_true", help="SwiGLU MLP instead of GELU (LLaMA)")
    g.add_argument("--openai-gelu", action="store_true", help="tanh-approximated GELU, as OpenAI's GPT-2 (default: exact GELU)")
    g.add_argument("--untie-embeddings-and-output-weights", action="store_true", help="separate output layer (LLaMA)")
    g.add_argument("--disable-bias-linear", action="store_true", help="no biases in linear layers and norms (LLaMA)")
    g.add_argument("--hidden-dropout", type=float, default=0.1, help="dropout on embeddings and residual branches")
    g.add_argument("--attention-dropout", type=float, default=0.1, help="dropout on attention probabilities")
    g.add_argument("--init-method-std", type=float, default=0.02, help="standard deviation of the weight init")
    g.add_argument("--make-vocab-size-divisible-by", type=int, default=128, help="pad the vocabulary to a multiple of this")


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    g = p.add_argument_group("data")
    g.add_argument("--data-path", nargs="+", required=True, metavar="PATH",
                   help="dataset prefixes (PREFIX.bin/.idx), optionally weighted: 0.3 web 0.7 books")
    g.add_argument("--split", default="969,30,1", help="train,valid,test proportions of each dataset's documents")
    g.add_argument("--seq-length", type=int, default=None, help="tokens per sample (default: the position count)")
    g.add_argument("--vocab-file", help="GPT-2 vocab.json the data was tokenized with (gives the vocabulary size)")
    g.add_argument("--merge-file", help="GPT-2 merges.txt, kept with the checkpoints for evaluation and export")
    g.add_argument("--vocab-size", type=int, help="vocabulary size when no --vocab-file is given")
    g.add_argument("--no-index-cache", action="store_true", help="rebuild the sample index instead of caching it beside the data")
    g = p.add_argument_group("training")
    g.add_argument("--micro-batch-size", type=int, default=4, help="sequences per forward/backward pass")
    g.add_argument("--global-batch-size", type=int, default=8, help="sequences per optimizer step (gradient accumulation)")
    g.add_argument("--train-iters", type=int, required=True, help="optimizer steps to train for")
    g.add_argument("--lr", type=float, default=6e-4, help="peak learning rate")
    g.add_argument("--min-lr", type=float, default=0.0, help="learning rate at the end of the decay")
    g.add_argument("--lr-decay-style", choices=["cosine", "linear", "constant"], default="cosine", help="decay after warmup")
    g.add_argument("--lr-decay-iters", type=int, help="iterations of warmup + decay (default: --train-iters)")
    g.add_argument("--lr-warmup-iters", type=int, default=0, help="iterations of linear warmup from 0")
    g.add_argument("--lr-warmup-fraction", type=float, help="warmup as a fraction of --lr-decay-iters (overrides --lr-warmup-iters)")
    g.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (not on biases and norms)")
    g.add_argument("--adam-beta1", type=float, default=0.9, help="AdamW beta1")
    g.add_argument("--adam-beta2", type=float, default=0.999, help="AdamW beta2")
    g.add_argument("--adam-eps", type=float, default=1e-8, help="AdamW epsilon")
    g.add_argument("--clip-grad", type=float, default=1.0, help="clip the global gradient norm to this (0: no clipping)")
    g.add_argument("--seed", type=int, default=1234, help="seed of the weights, dropout and data order")
    g.add_argument("--device", default="auto", help="cuda, cpu, or auto (cuda when available)")
    precision = g.add_mutually_exclusive_group()
    precision.add_argument("--bf16", action="store_true", help="bf16 autocast (fp32 weights and optimizer)")
    precision.add_argument("--fp16", action="store_true", help="fp16 autocast with dynamic loss scaling")
    g.add_argument("--initial-loss-scale", type=float, default=2.0**32, help="fp16: starting loss scale")
    g.add_argument("--loss-scale-window", type=int, default=1000, help="fp16: clean steps before the scale doubles")
    g = p.add_argument_group("parallelism (launch with torchrun, or --nproc-per-node)")
    g.add_argument("--nproc-per-node", type=int, help="start this many processes on this machine (through torchrun)")
    g.add_argument("--tensor-model-parallel-size", type=int, default=1,
                   help="split each layer's matrices (and the vocabulary) over this many ranks; must divide the heads")
    g.add_argument("--sequence-parallel", action="store_true",
                   help="with tensor parallelism: also split norms, dropout and residuals along the sequence")
    g.add_argument("--pipeline-model-parallel-size", type=int, default=1,
                   help="cut the layers into this many pipeline stages on different ranks (1F1B schedule)")
    g.add_argument("--num-layers-per-virtual-pipeline-stage", type=int,
                   help="interleaved schedule: stages of this many layers, several per pipeline rank")
    g.add_argument("--use-distributed-optimizer", action="store_true",
                   help="shard optimizer state, gradients and parameters over data-parallel ranks (FSDP2, ZeRO-style); "
                   "always so when data and tensor parallelism are combined")
    g.add_argument("--overlap-grad-reduce", action=argparse.BooleanOptionalAction, default=True,
                   help="reduce gradients in buckets while the backward pass runs (DDP); --no-overlap-grad-reduce "
                   "reduces them in one piece after it. FSDP2 always reduce-scatters per layer during backward")
    g.add_argument("--recompute-activations", action="store_true",
                   help="selective activation recomputation (same as --recompute-granularity selective)")
    g.add_argument("--recompute-granularity", choices=["full", "selective"],
                   help="recompute activations in the backward pass to save memory: full = whole layers, "
                   "selective = the attention core")
    g.add_argument("--distributed-timeout-minutes", type=float, default=10.0,
                   help="a collective waiting longer than this (a lost peer) fails the run instead of hanging")
    g = p.add_argument_group("checkpoints and logging")
    g.add_argument("--save", type=Path, help="checkpoint directory (Megatron layout)")
    g.add_argument("--load", type=Path, help="resume from the newest checkpoint here (none there: start fresh)")
    g.add_argument("--save-interval", type=int, help="save every N iterations (and always at the end)")
    g.add_argument("--ckpt-format", choices=["torch", "torch_dist"],
                   help="one file (default for one process) or torch.distributed.checkpoint shards written by every "
                   "rank (default for several); either loads into any layout")
    g.add_argument("--no-load-optim", action="store_true", help="with --load: weights only, fresh optimizer")
    g.add_argument("--no-load-rng", action="store_true", help="with --load: do not restore the random state")
    g.add_argument("--finetune", action="store_true", help="with --load: weights only, start at iteration 0")
    g.add_argument("--exit-interval", type=int, help="save and stop once the iteration is a multiple of N (scheduled jobs)")
    g.add_argument("--log-interval", type=int, default=10, help="log every N iterations")
    g.add_argument("--eval-interval", type=int, default=100, help="validation loss every N iterations")
    g.add_argument("--eval-iters", type=int, default=10, help="global batches of the validation split per evaluation")
    g.add_argument("--tensorboard-dir", type=Path, help="write TensorBoard scalars here")
    g.add_argument("--peak-tflops", type=float, help="device peak for MFU (default: known GPUs; CPU: not reported)")


@dataclass
class GPTConfig:
    vocab_size: int  # padded, as Megatron pads it (tokenizers.gpt2.padded_vocab_size)
    num_layers: int = 12
    hidden_size: int = 768
    num_attention_heads: int = 12
    max_position_embeddings: int = 1024
    ffn_hidden_size: int | None = None  # 4h for GELU; SwiGLU defaults to Megatron-LLaMA's 2/3 of 4h, rounded
    position_embedding: Literal["learned", "rope"] = "learned"
    normalization: Literal["layernorm", "rmsnorm"] = "layernorm"
    activation: Literal["gelu", "gelu_tanh", "swiglu"] = "gelu"  # exact GELU (Megatron's default), tanh (OpenAI GPT-2), SwiGLU
    tie_embeddings: bool = True
    bias: bool = True
    norm_epsilon: float = 1e-5
    rope_theta: float = 10000.0
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    init_std: float = 0.02
    extra: dict = field(default_factory=dict)  # room for settings that do not change the math

    def __post_init__(self):
        # A config also comes from files (checkpoints, Hugging Face config.json): check it before any tensor.
        for name in ("vocab_size", "num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TextmillError(f"model config: {name} must be a positive whole number, not {value!r}")
        if self.ffn_hidden_size is None:
            if self.activation == "swiglu":
                self.ffn_hidden_size = 256 * math.ceil(int(8 * self.hidden_size / 3) / 256)
            else:
                self.ffn_hidden_size = 4 * self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict:
        return asdict(self)

    def architecture(self) -> dict:
        """The fields that decide the shapes and the math of the trained function (not dropout or init),
        i.e. what a checkpoint's weights must agree with."""
        return {k: v for k, v in asdict(self).items()
                if k not in ("hidden_dropout", "attention_dropout", "init_std", "extra")}


def parallel_dims(args, world: int) -> ParallelDims:
    if args.recompute_activations and not args.recompute_granularity:
        args.recompute_granularity = "selective"
    virtual = 1
    if args.num_layers_per_virtual_pipeline_stage:
        if args.pipeline_model_parallel_size < 2:
            raise TextmillError("--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size of 2 or more")
        layers = args.num_layers or PRESETS[args.model_preset]["num_layers"]
        per_rank = layers // args.pipeline_model_parallel_size
        if layers % args.pipeline_model_parallel_size or per_rank % args.num_layers_per_virtual_pipeline_stage:
            raise TextmillError(f"--num-layers {layers} is not divisible by --pipeline-model-parallel-size "
                                f"{args.pipeline_model_parallel_size} x --num-layers-per-virtual-pipeline-stage "
                                f"{args.num_layers_per_virtual_pipeline_stage}")
        virtual = per_rank // args.num_layers_per_virtual_pipeline_stage
    if args.sequence_parallel and args.tensor_model_parallel_size < 2:
        raise TextmillError("--sequence-parallel needs --tensor-model-parallel-size of 2 or more")
    return ParallelDims(world, args.tensor_model_parallel_size, args.pipeline_model_parallel_size, virtual)


def model_config(args, vocab_size: int) -> GPTConfig:
    sizes = dict(PRESETS[args.model_preset])
    for name in ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"):
        if getattr(args, name) is not None:
            sizes[name] = getattr(args, name)
    if sizes["hidden_size"] % sizes["num_attention_heads"]:
        raise TextmillError(f"--hidden-size {sizes['hidden_size']} is not divisible by --num-attention-heads {sizes['num_attention_heads']}")
    return GPTConfig(
        vocab_size=padded_vocab_size(vocab_size, args.make_vocab_size_divisible_by),
        ffn_hidden_size=args.ffn_hidden_size,
        position_embedding="rope" if args.position_embedding_type == "rope" else "learned",
        rope_theta=args.rotary_base,
        normalization="rmsnorm" if args.normalization == "RMSNorm" else "layernorm",
        norm_epsilon=args.norm_epsilon,
        activation="swiglu" if args.swiglu else "gelu_tanh" if args.openai_gelu else "gelu",
        tie_embeddings=not args.untie_embeddings_and_output_weights,
        bias=not args.disable_bias_linear,
        hidden_dropout=args.hidden_dropout,
        attention_dropout=args.attention_dropout,
        init_std=args.init_method_std,
        **sizes,
    )


def unpadded_vocab_size(args) -> int:
    if args.vocab_file:
        try:
            return len(json.loads(Path(args.vocab_file).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise TextmillError(f"--vocab-file {args.vocab_file}: {exc}") from None
    if args.vocab_size:
        return args.vocab_size
    raise TextmillError("give --vocab-file (and --merge-file) or --vocab-size")


def check_args(args, world: int, vocab_size: int) -> tuple[GPTConfig, ParallelDims, int]:
    """The checks that need neither data nor a device, so a bad setting is refused before any work (also
    when `textmill run` reads [train]): the model config, the parallel layout and the sequence length."""
    if args.fp16 and (args.use_distributed_optimizer or args.tensor_model_parallel_size > 1 or args.pipeline_model_parallel_size > 1):
        raise TextmillError("--fp16 is supported with plain data parallelism only (its overflow check is per rank); use --bf16")
    cfg = model_config(args, vocab_size)
    dims = parallel_dims(args, world)
    dims.check(cfg, args.global_batch_size, args.micro_batch_size)
    seq_len = args.seq_length or cfg.max_position_embeddings
    if seq_len > cfg.max_position_embeddings:
        raise TextmillError(f"--seq-length {seq_len} is longer than --max-position-embeddings {cfg.max_position_embeddings}")
    return cfg, dims, seq_len
