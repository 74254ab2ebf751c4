"""Loads a `textmill export megatron` checkpoint into Megatron-core's own GPTModel (local layers, GPT-2 blocks),
one process per rank (gloo) as Megatron-LM would, in either format, strictly:

- torch: each rank builds its part of the model from the args in its `mp_rank_TT[_PPP]/model_optim_rng.pt`
  and loads that file with load_state_dict(strict=True);
- torch_dist: the args and content metadata come from common.pt (read as Megatron-LM reads it, weights only,
  with Megatron-core's safe globals), the vocabulary is padded for this layout as Megatron-LM pads it, and
  `dist_checkpointing.load` reads the model's sharded state dict with StrictHandling.RAISE_ALL (no key
  missing, none unexpected), then load_state_dict(strict=True).

Each rank then writes what its model holds to OUT/expected_tpT_ppP.pt (the test joins the ranks and compares
with textmill's model) and, with one pipeline stage, rank 0 writes the logits of fixed tokens, gathered over
the tensor-parallel ranks, to OUT/logits.pt.

    python -m torch.distributed.run --standalone --nproc-per-node TP*PP tests/support/megatron_core_loader.py ITER_DIR TP PP OUT
"""

import contextlib
import os
import sys
from pathlib import Path

os.environ["TORCHDYNAMO_DISABLE"] = "1"  # Megatron-core's fused bias-GELU, run as written instead of compiled

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main(folder: Path, tp: int, pp: int, out: Path) -> None:
    # Megatron-core on a CPU: where it would move a tensor to the GPU (the tied embedding's copy on the last
    # pipeline stage, all-reduced with the first's), the tensor stays where it is; no CUDA random state is
    # forked for attention (no dropout in evaluation).
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: "cpu"
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    from megatron.core import dist_checkpointing, parallel_state
    from megatron.core.dist_checkpointing.validation import StrictHandling
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.safe_globals import register_safe_globals
    from megatron.core.tensor_parallel.random import CudaRNGStatesTracker
    from megatron.core.transformer.transformer_config import TransformerConfig

    CudaRNGStatesTracker.fork = lambda self, *args, **kwargs: contextlib.nullcontext()
    dist.init_process_group("gloo")
    parallel_state.initialize_model_parallel(tp, pp)
    tp_rank, pp_rank = parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_pipeline_model_parallel_rank()
    distributed = (folder / "metadata.json").exists()
    if distributed:
        register_safe_globals()
        common = dist_checkpointing.load_common_state_dict(str(folder))
        args = common["args"]
        multiple = args.make_vocab_size_divisible_by * tp
        padded = -(-args.vocab_size // multiple) * multiple
    else:
        saved = torch.load(folder / (f"mp_rank_{tp_rank:02d}" + (f"_{pp_rank:03d}" if pp > 1 else "")) /
                           "model_optim_rng.pt", weights_only=False)  # the test's own export
        args, padded = saved["args"], saved["args"].padded_vocab_size
    config = TransformerConfig(num_layers=args.num_layers, hidden_size=args.hidden_size,
                               num_attention_heads=args.num_attention_heads, ffn_hidden_size=args.ffn_hidden_size,
                               layernorm_epsilon=args.layernorm_epsilon, bias_activation_fusion=args.bias_gelu_fusion,
                               use_cpu_initialization=True, tensor_model_parallel_size=tp,
                               pipeline_model_parallel_size=pp, pipeline_dtype=torch.float32)
    model = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=padded,
                     max_sequence_length=args.max_position_embeddings, position_embedding_type="learned_absolute",
                     share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
                     pre_process=parallel_state.is_pipeline_first_stage(),
                     post_process=parallel_state.is_pipeline_last_stage())
    if distributed:
        # As Megatron-LM asks: the model's sharded state dict built with the checkpoint's content metadata, nested
        # under "model" (the answer holds common.pt's entries beside it).
        metadata = dict(dist_checkpointing.load_content_metadata(preloaded_state_dict=common))
        metadata["dp_cp_group"] = parallel_state.get_data_parallel_group(with_context_parallel=True)
        state = dist_checkpointing.load({"model": model.sharded_state_dict(metadata=metadata)}, str(folder),
                                        strict=StrictHandling.RAISE_ALL)["model"]
    else:
        state = saved["model"]
    model.load_state_dict(state, strict=True)
    torch.save({n: t for n, t in model.state_dict().items() if not n.endswith("_extra_state")},
               out / f"expected_tp{tp_rank}_pp{pp_rank}.pt")
    if pp == 1:
        tokens = torch.randint(0, args.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        causal = torch.ones(1, 1, tokens.shape[1], tokens.shape[1], dtype=torch.bool).triu(1)  # True: masked
        with torch.no_grad():
            part = model.eval()(tokens, positions, causal)  # [batch, tokens, this rank's share of the vocabulary]
        parts = [torch.empty_like(part) for _ in range(tp)]
        dist.all_gather(parts, part.contiguous(), group=parallel_state.get_tensor_model_parallel_group())
        if dist.get_rank() == 0:
            torch.save({"tokens": tokens, "logits": torch.cat(parts, -1)[..., :args.vocab_size]}, out / "logits.pt")
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
