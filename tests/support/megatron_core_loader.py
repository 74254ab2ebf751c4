"""Loads a `textmill export megatron` checkpoint into Megatron-core's own GPTModel (local layers, GPT-2 blocks),
one process per rank (gloo) as Megatron-LM would: each rank builds its part of the model from the args in its
file and loads `mp_rank_TT[_PPP]/model_optim_rng.pt` with strict=True (no key missing, none unexpected, every
shape equal), then checks that every tensor of the model is the file's.

    python -m torch.distributed.run --standalone --nproc-per-node TP*PP tests/support/megatron_core_loader.py DIR TP PP
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist


def main(folder: Path, tp: int, pp: int) -> None:
    # Megatron-core on a CPU: where it would move a tensor to the GPU (the tied embedding's copy on the last
    # pipeline stage, all-reduced with the first's), the tensor stays where it is.
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: "cpu"
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    dist.init_process_group("gloo")
    parallel_state.initialize_model_parallel(tp, pp)
    tp_rank, pp_rank = parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_pipeline_model_parallel_rank()
    file = folder / (f"mp_rank_{tp_rank:02d}" + (f"_{pp_rank:03d}" if pp > 1 else "")) / "model_optim_rng.pt"
    saved = torch.load(file, weights_only=False)  # the test's own export
    args = saved["args"]
    config = TransformerConfig(num_layers=args.num_layers, hidden_size=args.hidden_size,
                               num_attention_heads=args.num_attention_heads, ffn_hidden_size=args.ffn_hidden_size,
                               layernorm_epsilon=args.layernorm_epsilon, use_cpu_initialization=True,
                               tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                               pipeline_dtype=torch.float32)
    model = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=args.padded_vocab_size,
                     max_sequence_length=args.max_position_embeddings, position_embedding_type="learned_absolute",
                     share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
                     pre_process=parallel_state.is_pipeline_first_stage(),
                     post_process=parallel_state.is_pipeline_last_stage())
    model.load_state_dict(saved["model"], strict=True)
    loaded = {n: t for n, t in model.state_dict().items() if not n.endswith("_extra_state")}
    assert sorted(loaded) == sorted(saved["model"]), (sorted(loaded), sorted(saved["model"]))
    for name, tensor in loaded.items():
        assert torch.equal(tensor, saved["model"][name]), name
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
