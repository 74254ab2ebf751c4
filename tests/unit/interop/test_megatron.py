"""Megatron-LM legacy GPT checkpoints into textmill, against transformers' GPT-2 they were written from
(tests/support/megatron_files.py): every checkpoint version's query/key/value order, with and without `args`,
tensor-parallel shards and pipeline stages; and against the names Megatron-core's own GPTModel saves. Files that would
run code, or hold another block, are refused. What starts Megatron-core's processes (its loads of textmill's
exports, its own torch_dist saves) is in tests/integration/test_megatron_core.py."""

import pytest
import torch

from support.cli import run_cli
from support.files import TEST_DATA
from support.megatron_files import RunsCode, hf_gpt2, write_megatron
from textmill.errors import TextmillError
from textmill.interop.megatron import import_megatron
from textmill.trainer.checkpoint import load_model

transformers = pytest.importorskip("transformers")
VOCAB, MERGES = TEST_DATA / "gpt2-vocab.json", TEST_DATA / "gpt2-merges.txt"


CASES = {  # name: (version, tensor parallel, pipeline parallel, args, release, stored dtype, names)
    "v0-release-no-args": (0, 1, 1, False, True, torch.float16, "legacy"),  # NVIDIA's GPT-2 345M release is so
    "v1-tp2": (1.0, 2, 1, True, False, torch.float32, "legacy"),
    "v2-pp2": (2.0, 1, 2, True, False, torch.float32, "legacy"),
    "v3-tp2-pp2-fp16": (3.0, 2, 2, True, False, torch.float16, "legacy"),
    "core-tp2-pp2": (3.0, 2, 2, True, False, torch.float32, "core"),
    "core-transformer-engine-tp2": (3.0, 2, 1, True, False, torch.bfloat16, "core-te"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_megatron_checkpoints_import_with_transformers_logits(tmp_path, case):
    version, tp, pp, with_args, release, dtype, names = CASES[case]
    hf_model = hf_gpt2(bf16_exact=dtype == torch.bfloat16)
    write_megatron(tmp_path / "megatron", hf_model, version, tp, pp, with_args, release, dtype, names=names)
    r = import_megatron(tmp_path / "megatron", tmp_path / "ckpt", VOCAB, MERGES, heads=None if with_args else 4)
    assert (r["checkpoint_version"], r["tensor_parallel"], r["pipeline_parallel"]) == (version, tp, pp)
    ours, ckpt = load_model(tmp_path / "ckpt")
    assert ckpt.release and ckpt.meta["vocab_size"] == 50257 and ours.config.vocab_size == r["padded_vocab_size"]
    assert ours.config.activation == "gelu_tanh" and ours.config.num_layers == 4
    tokens = torch.randint(0, 50257, (2, 100), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (hf_model(tokens).logits - ours(tokens)[..., :50257]).abs().max().item() < 1e-5


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_megatron(tmp_path / "megatron", hf_gpt2(), 3.0)
    file = tmp_path / "megatron" / "iter_0000010" / "mp_rank_00" / "model_optim_rng.pt"
    state = torch.load(file, weights_only=False)
    state["args"].payload = RunsCode()
    torch.save(state, file)
    with pytest.raises(TextmillError, match="model_optim_rng.pt: refused or unreadable as a Megatron-LM checkpoint"):
        import_megatron(tmp_path / "megatron", tmp_path / "ckpt", VOCAB, MERGES)
    assert not (tmp_path / "ran-code").exists() and not (tmp_path / "ckpt").exists()


def test_another_block_and_a_missing_shard_are_one_line_each(tmp_path):
    folder = write_megatron(tmp_path / "megatron", hf_gpt2(), 3.0, tp=2)
    file = folder / "iter_0000010" / "mp_rank_00" / "model_optim_rng.pt"
    state = torch.load(file, weights_only=False)
    state["args"].swiglu = True
    torch.save(state, file)
    with pytest.raises(TextmillError, match="cannot import yet \\(SwiGLU\\): GPT-2 blocks only"):
        import_megatron(folder, tmp_path / "ckpt", VOCAB, MERGES)
    (folder / "iter_0000010" / "mp_rank_01" / "model_optim_rng.pt").unlink()
    (folder / "iter_0000010" / "mp_rank_01").rmdir()
    (folder / "iter_0000010" / "mp_rank_02").mkdir()
    (folder / "iter_0000010" / "mp_rank_02" / "model_optim_rng.pt").write_bytes(file.read_bytes())
    with pytest.raises(TextmillError, match="3 x 1 shards expected, missing mp_rank_01"):
        import_megatron(folder, tmp_path / "ckpt", VOCAB, MERGES)


@pytest.mark.parametrize("tp, pp", [(1, 1), (2, 1), (4, 1), (1, 2), (2, 2)])
def test_export_megatron_then_import_gives_the_same_tensors(tmp_path, tp, pp):
    from textmill.interop.megatron import read_megatron_file
    from textmill.interop.megatron_export import export_megatron

    write_megatron(tmp_path / "megatron", hf_gpt2(), 3.0)
    import_megatron(tmp_path / "megatron", tmp_path / "ckpt", VOCAB, MERGES)
    original, _ = load_model(tmp_path / "ckpt")
    r = export_megatron(tmp_path / "ckpt", tmp_path / "out", tp, pp, names="legacy", fmt="torch")
    assert r["padded_vocab_size"] % (128 * tp) == 0
    assert (tmp_path / "out" / "latest_checkpointed_iteration.txt").read_text() == "release"
    shard = "mp_rank_00" + ("_000" if pp > 1 else "")
    state = read_megatron_file(tmp_path / "out" / "release" / shard / "model_optim_rng.pt")
    assert state["checkpoint_version"] == 3.0
    assert (state["args"].tensor_model_parallel_size, state["args"].pipeline_model_parallel_size) == (tp, pp)
    assert state["args"].padded_vocab_size == r["padded_vocab_size"] and state["args"].num_layers == 4
    back = import_megatron(tmp_path / "out", tmp_path / "back", VOCAB, MERGES)
    assert (back["tensor_parallel"], back["pipeline_parallel"]) == (tp, pp)
    returned, _ = load_model(tmp_path / "back")
    theirs = returned.state_dict()
    for name, tensor in original.state_dict().items():
        rows = min(tensor.shape[0], theirs[name].shape[0])  # the vocabulary's padding may differ
        assert torch.equal(theirs[name][:rows], tensor[:rows]), name


def test_the_names_megatron_core_itself_saves_import_tensor_for_tensor(mesh, tmp_path):
    """Megatron-core's own GPTModel (built here on the CPU, local layers: its forward pass needs CUDA, so the
    check is on the tensors), saved as Megatron-LM saves --ckpt-format torch checkpoints: every tensor lands
    where textmill's model reads it, the fused query/key/value rows in the same order."""
    import argparse

    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(1, 1)
    try:
        torch.manual_seed(0)
        config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True)
        core = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=50304, max_sequence_length=64,
                        position_embedding_type="learned_absolute")
        with torch.no_grad():  # norms and biases drawn too (they start at 1 and 0)
            for p in core.parameters():
                if p.ndim == 1:
                    p.add_(torch.randn_like(p))
        state = core.state_dict_for_save_checkpoint()
    finally:
        parallel_state.destroy_model_parallel()
    from pathlib import PosixPath

    from megatron.core.enums import ModelType
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.rerun_state_machine import RerunState
    from megatron.core.transformer.enums import AttnBackend

    # What Megatron-LM's training script saves among its args and beside them: its own enums and dataclass.
    args = argparse.Namespace(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
                              max_position_embeddings=64, padded_vocab_size=50304, bias_gelu_fusion=False,
                              model_type=ModelType.encoder_or_decoder, attention_backend=AttnBackend.auto,
                              save=PosixPath("/checkpoints/gpt"), optimizer_config=OptimizerConfig(lr=1e-4))
    shard = tmp_path / "megatron" / "iter_0000005" / "mp_rank_00"
    shard.mkdir(parents=True)
    torch.save({"model": state, "args": args, "checkpoint_version": 3.0, "iteration": 5,
                "rerun_state_machine": {"state": RerunState.NOT_RUNNING_YET}}, shard / "model_optim_rng.pt")
    (tmp_path / "megatron" / "latest_checkpointed_iteration.txt").write_text("5")
    # In a process of its own: importing megatron.core (as this one has) registers its classes with torch.
    r = run_cli("import", "megatron", str(tmp_path / "megatron"), "--save", str(tmp_path / "ckpt"),
                "--vocab-file", str(VOCAB), "--merge-file", str(MERGES))
    assert r.returncode == 0, r.stderr[-2000:]
    ours, _ = load_model(tmp_path / "ckpt")
    assert ours.config.activation == "gelu"  # Megatron-core's default, the exact GELU
    mapped = {"wte.weight": "embedding.word_embeddings.weight", "wpe.weight": "embedding.position_embeddings.weight",
              "norm_f.weight": "decoder.final_layernorm.weight", "norm_f.bias": "decoder.final_layernorm.bias"}
    for i in range(2):
        for theirs, mine in (("input_layernorm", "norm1"), ("self_attention.linear_qkv", "attn.qkv"),
                             ("self_attention.linear_proj", "attn.proj"), ("pre_mlp_layernorm", "norm2"),
                             ("mlp.linear_fc1", "mlp.fc1"), ("mlp.linear_fc2", "mlp.fc2")):
            for kind in ("weight", "bias"):
                mapped[f"blocks.{i}.{mine}.{kind}"] = f"decoder.layers.{i}.{theirs}.{kind}"
    ours_state = ours.state_dict()
    assert sorted(ours_state) == sorted(mapped)
    for mine, theirs in mapped.items():
        assert torch.equal(ours_state[mine], state[theirs].float()), mine
