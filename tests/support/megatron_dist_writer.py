"""Writes a Megatron-LM `--ckpt-format torch_dist` checkpoint with Megatron-core's own code, one process per
rank, as Megatron-LM's training script saves one: Megatron-core's GPTModel (local layers, GPT-2 blocks) cut
into TP x PP ranks, its sharded state dict, the random state as a sharded object (a bytes entry), and args,
checkpoint_version and iteration beside them (common.pt). Each rank also writes its own plain state dict to
OUT/expected_tpT_ppP.pt, what the import is checked against.

    python -m torch.distributed.run --standalone --nproc-per-node TP*PP tests/support/megatron_dist_writer.py OUT TP PP

Megatron-core's saver waits for CUDA and puts a flag on the current device; on a CPU the wait is skipped and
the flag goes to the CPU. Its writer starts a helper process by spawning, hence the __main__ guard.
"""

import argparse
import sys
import zlib
from pathlib import Path

import torch
import torch.distributed as dist

LAYERS, HIDDEN, HEADS, FFN, VOCAB, POSITIONS, ITERATION = 4, 64, 4, 256, 50304, 64, 5


def main(out: Path, tp: int, pp: int) -> None:
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: "cpu"
    from megatron.core import dist_checkpointing, parallel_state
    from megatron.core.dist_checkpointing.mapping import ShardedObject
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    dist.init_process_group("gloo")
    parallel_state.initialize_model_parallel(tp, pp)
    tp_rank, pp_rank = parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_pipeline_model_parallel_rank()
    torch.manual_seed(0)
    config = TransformerConfig(num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, ffn_hidden_size=FFN,
                               use_cpu_initialization=True, tensor_model_parallel_size=tp,
                               pipeline_model_parallel_size=pp, pipeline_dtype=torch.float32)
    model = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=VOCAB, max_sequence_length=POSITIONS,
                     position_embedding_type="learned_absolute", pre_process=parallel_state.is_pipeline_first_stage(),
                     post_process=parallel_state.is_pipeline_last_stage())
    with torch.no_grad():  # every tensor drawn afresh: norms and biases too (they start at 1 and 0); a tensor
        for name, p in model.named_parameters():  # replicated over tensor-parallel ranks is drawn alike on each
            split = getattr(p, "tensor_model_parallel", False)
            seed = zlib.crc32(f"{pp_rank}/{tp_rank if split else 'all'}/{name}".encode())
            p.copy_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(seed)))
    args = argparse.Namespace(num_layers=LAYERS, hidden_size=HIDDEN, ffn_hidden_size=FFN, num_attention_heads=HEADS,
                              max_position_embeddings=POSITIONS, padded_vocab_size=VOCAB, bias_gelu_fusion=False,
                              tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, ckpt_format="torch_dist")
    random_state = ShardedObject("rng_state", [{"torch": torch.get_rng_state()}], (pp, tp), (pp_rank, tp_rank),
                                 replica_id=0)
    folder = out / f"iter_{ITERATION:07d}"
    if dist.get_rank() == 0:
        folder.mkdir(parents=True)
    dist.barrier()
    dist_checkpointing.save({"model": model.sharded_state_dict(), "rng_state": random_state, "args": args,
                             "checkpoint_version": 3.0, "iteration": ITERATION}, str(folder))
    torch.save({n: t for n, t in model.state_dict().items() if not n.endswith("_extra_state")},
               out / f"expected_tp{tp_rank}_pp{pp_rank}.pt")
    dist.barrier()
    if dist.get_rank() == 0:
        (out / "latest_checkpointed_iteration.txt").write_text(str(ITERATION))
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
