"""Parallel training with real torch.distributed processes (gloo on CPU), launched the way users launch
them (`textmill train --nproc-per-node N`, i.e. torchrun): equivalence with one process, and
checkpoints that load into another layout."""

import json

import pytest
import torch

from support.cli import run_cli
from support.training import LLAMA, parallel_config
from textmill.trainer.checkpoint import load_model
from textmill.trainer.train import Trainer


def logged(save):
    records = [json.loads(line) for line in (save / "metrics.jsonl").read_text().splitlines()]
    return ({r["iteration"]: r["lm_loss"] for r in records if "lm_loss" in r},
            {r["iteration"]: r["valid_loss"] for r in records if "valid_loss" in r})


def single_process(corpus, save, iters, **settings):
    Trainer(parallel_config(corpus, train_iters=iters, save=save, **settings)).train()
    return logged(save)


def distributed(corpus, save, nproc, iters, **settings):
    """`textmill train` in `nproc` processes, with the command-line options of the config."""
    settings = parallel_config(corpus, train_iters=iters, save=save, **settings)
    r = run_cli("train", "--nproc-per-node", str(nproc), *settings.to_argv())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sum(line.startswith("train: ") for line in r.stdout.splitlines()) == 1  # one summary, from rank 0
    return logged(save)


def assert_same_curve(a, b, rel=1e-5):
    assert sorted(a) == sorted(b)
    for it in a:
        assert a[it] == pytest.approx(b[it], rel=rel), (it, a[it], b[it])


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    return single_process(corpus, tmp_path_factory.mktemp("single") / "ckpt", 6)


@pytest.mark.parametrize("sharded", [False, True], ids=["ddp", "distributed-optimizer"])
def test_data_parallel_gives_the_single_process_curve(corpus, reference, tmp_path, sharded):
    train, valid = distributed(corpus, tmp_path / "ckpt", 2, 6, use_distributed_optimizer=sharded)
    assert_same_curve(train, reference[0])
    assert_same_curve(valid, reference[1])
    meta = json.loads((tmp_path / "ckpt" / "iter_0000006" / "textmill.json").read_text())
    assert meta["parallel"] == {"world": 2, "dp": 2, "tp": 1, "pp": 1, "virtual": 1}
    # Each rank wrote its own shard file; nothing was gathered through rank 0.
    assert len(list((tmp_path / "ckpt" / "iter_0000006").glob("__*_0.distcp"))) == 2


@pytest.mark.parametrize("sharded", [False, True], ids=["ddp", "fsdp2"])
def test_compiled_blocks_under_data_parallelism_give_the_single_process_curve(corpus, reference, tmp_path, sharded):
    """--compile with DDP and with FSDP2 (the distributed optimizer), to float tolerance of the eager curve."""
    train, valid = distributed(corpus, tmp_path / "ckpt", 2, 6, use_distributed_optimizer=sharded, compile=True)
    assert_same_curve(train, reference[0], rel=1e-4)
    assert_same_curve(valid, reference[1], rel=1e-4)


def test_fsdp2_under_bf16_gathers_in_bf16_and_trains_the_ddp_curve(corpus, tmp_path):
    """--bf16 with the distributed optimizer: parameters gathered in bf16 (the dtype autocast computes in),
    gradients reduced in fp32; the curve of DDP under the same autocast."""
    ddp = distributed(corpus, tmp_path / "ddp", 2, 6, bf16=True)
    fsdp = distributed(corpus, tmp_path / "fsdp", 2, 6, bf16=True, use_distributed_optimizer=True)
    assert_same_curve(fsdp[0], ddp[0], rel=2e-3)


TP, PP, SP = dict(tensor_model_parallel_size=2), dict(pipeline_model_parallel_size=2), dict(sequence_parallel=True)


def test_model_parallelism_under_bf16_moves_bf16_and_trains_the_single_process_curve(corpus, tmp_path):
    """--bf16 with tensor, sequence and pipeline parallelism: the sublayers' inputs are gathered and the hidden
    states passed between stages in bf16 (unit tests show the dtypes); the curve stays the single process's
    under the same autocast, to the rounding of the stage boundary."""
    single = single_process(corpus, tmp_path / "single", 6, bf16=True)
    split = distributed(corpus, tmp_path / "split", 4, 6, bf16=True, **PP, **TP, **SP)
    assert_same_curve(split[0], single[0], rel=1e-2)


LAYOUTS = {  # name: (processes, settings, expected parallel sizes)
    "tp2": (2, TP, {"dp": 1, "tp": 2, "pp": 1}),
    "tp2-sp": (2, TP | SP, {"dp": 1, "tp": 2, "pp": 1}),
    "pp2-1f1b": (2, PP, {"dp": 1, "tp": 1, "pp": 2}),
    "dp2xtp2": (4, TP, {"dp": 2, "tp": 2, "pp": 1}),
    "pp2xtp2-sp": (4, PP | TP | SP, {"dp": 1, "tp": 2, "pp": 2}),
    "pp2xdp2": (4, PP, {"dp": 2, "tp": 1, "pp": 2}),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_model_parallel_layouts_give_the_single_process_curve(corpus, reference, tmp_path, layout):
    nproc, settings, sizes = LAYOUTS[layout]
    train, valid = distributed(corpus, tmp_path / "ckpt", nproc, 6, **settings)
    assert_same_curve(train, reference[0])
    assert_same_curve(valid, reference[1])
    meta = json.loads((tmp_path / "ckpt" / "iter_0000006" / "textmill.json").read_text())
    assert {k: meta["parallel"][k] for k in sizes} == sizes


def test_interleaved_pipeline_and_llama_blocks_under_tensor_parallelism(corpus, tmp_path):
    # Four layers on two pipeline ranks in stages of one layer: each rank holds two non-adjacent stages.
    whole = single_process(corpus, tmp_path / "four", 6, num_layers=4)
    interleaved = distributed(corpus, tmp_path / "interleaved", 2, 6, num_layers=4, **PP,
                              num_layers_per_virtual_pipeline_stage=1)
    assert_same_curve(interleaved[0], whole[0])
    assert_same_curve(interleaved[1], whole[1])
    # RoPE, SwiGLU (gate split with its up projection), RMSNorm, an untied output layer: TP + SP.
    llama = single_process(corpus, tmp_path / "llama", 6, **LLAMA)
    split = distributed(corpus, tmp_path / "llama-tp", 2, 6, **LLAMA, **TP, **SP)
    assert_same_curve(split[0], llama[0])
    assert_same_curve(split[1], llama[1])


def test_grouped_query_attention_under_tensor_and_pipeline_parallelism(corpus, tmp_path):
    """Four query heads in two groups (one group per tensor-parallel rank, each with its two queries), LLaMA
    3.1's rope scaling, two pipeline stages: the single-process curve, and a checkpoint that loads whole."""
    gqa = dict(**LLAMA, group_query_attention=True, num_query_groups=2, use_rope_scaling=True, rope_scaling_factor=4.0,
               num_layers=4)
    whole = single_process(corpus, tmp_path / "gqa", 6, **gqa)
    split = distributed(corpus, tmp_path / "gqa-tp-pp", 4, 6, **gqa, **TP, **PP, **SP)
    assert_same_curve(split[0], whole[0])
    assert_same_curve(split[1], whole[1])
    model, _ = load_model(tmp_path / "gqa-tp-pp")
    reference, _ = load_model(tmp_path / "gqa")
    assert model.blocks["0"].attn.qkv.weight.shape == ((4 + 2 * 2) * 16, 64)
    tokens = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (model(tokens) - reference(tokens)).abs().max().item() < 1e-4


REPLICATED_KV = {
    # One key/value head for four queries, two ranks: each rank computes its two queries and that head.
    "mqa-tp2-sp-pp2": (dict(**LLAMA, group_query_attention=True, num_query_groups=1, num_layers=4), {**TP, **SP, **PP}),
    # Two groups over four ranks: each group's two queries split, its keys and values on both of its ranks.
    "gqa2-tp4": (dict(**LLAMA, group_query_attention=True, num_query_groups=2), dict(tensor_model_parallel_size=4)),
    # GPT-2's blocks (a QKV bias) with FSDP2 over two data-parallel ranks of two tensor-parallel ranks.
    "mqa-bias-tp2-dp2": (dict(group_query_attention=True, num_query_groups=1), TP),
}


@pytest.mark.parametrize("case", sorted(REPLICATED_KV))
def test_fewer_query_groups_than_tensor_parallel_ranks_replicate_keys_and_values(corpus, tmp_path, case):
    """TP > G: the single-process curve, and a checkpoint that loads whole into one process."""
    blocks, layout = REPLICATED_KV[case]
    whole = single_process(corpus, tmp_path / "one", 6, **blocks)
    split = distributed(corpus, tmp_path / "split", 4, 6, **blocks, **layout)
    assert_same_curve(split[0], whole[0])
    assert_same_curve(split[1], whole[1])
    model, _ = load_model(tmp_path / "split")
    reference, _ = load_model(tmp_path / "one")
    tokens = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (model(tokens) - reference(tokens)).abs().max().item() < 1e-4


def test_compile_with_tensor_parallelism_on_cpus_warns_and_trains_the_eager_curve(corpus, tmp_path):
    """On CPUs a compiled tensor-parallel block fails in its first backward pass (in DTensor): the run says
    so once and trains eager blocks, here with fewer key/value groups than ranks (GroupReplicatedQKV)."""
    blocks = dict(**LLAMA, group_query_attention=True, num_query_groups=1)
    eager = distributed(corpus, tmp_path / "eager", 2, 4, **blocks, **TP)
    r = run_cli("train", "--nproc-per-node", "2", *parallel_config(
        corpus, train_iters=4, save=tmp_path / "compiled", compile=True, **blocks, **TP).to_argv())
    assert r.returncode == 0, r.stderr[-3000:]
    assert "tensor-parallel blocks do not compile on CPUs" in r.stdout + r.stderr
    assert_same_curve(logged(tmp_path / "compiled")[0], eager[0])


def test_dropout_under_tensor_parallelism_draws_per_rank_where_ranks_hold_different_parts(corpus, tmp_path):
    """Hidden dropout on whole activations draws the single process's masks on every tensor-parallel rank
    (the same curve); attention and sequence-parallel dropout draw from each rank's own stream and train."""
    hidden = dict(hidden_dropout=0.1, attention_dropout=0.0)
    whole = single_process(corpus, tmp_path / "one", 4, **hidden)
    split = distributed(corpus, tmp_path / "split", 2, 4, **hidden, **TP)
    assert_same_curve(split[0], whole[0])
    distributed(corpus, tmp_path / "both", 2, 2, hidden_dropout=0.1, attention_dropout=0.1, **TP, **SP,
                recompute_granularity="full")
    # A run resumed from a checkpoint continues each rank's stream where it stood: the straight run's curve.
    dropout = dict(hidden_dropout=0.1, attention_dropout=0.1, **TP, **SP)
    straight = distributed(corpus, tmp_path / "straight", 2, 4, **dropout)
    distributed(corpus, tmp_path / "resumed", 2, 2, **dropout)
    resumed = distributed(corpus, tmp_path / "resumed", 2, 4, load=tmp_path / "resumed", **dropout)
    assert_same_curve({i: resumed[0][i] for i in (3, 4)}, {i: straight[0][i] for i in (3, 4)})


FAMILY_BLOCKS = {
    # Parallel residual, rotary embeddings on a quarter of each head (rotate-half), biases, untied output.
    "gpt-neox": dict(position_embedding_type="rope", rotary_percent=0.25, use_parallel_residual=True,
                     untie_embeddings_and_output_weights=True),
    # The same with one norm per block, neighbouring rotary pairs, no attention biases, a biased output layer.
    "gpt-j": dict(position_embedding_type="rope", rotary_percent=0.25, rotary_interleaved=True, use_parallel_residual=True,
                  shared_input_norm=True, disable_attention_bias=True, output_layer_bias=True, openai_gelu=True,
                  untie_embeddings_and_output_weights=True),
}


@pytest.mark.parametrize("family", sorted(FAMILY_BLOCKS))
def test_gpt_neox_and_gptj_blocks_under_tensor_and_pipeline_parallelism(corpus, tmp_path, family):
    """PP=2 x TP=2 + SP gives the single-process curve with each family's blocks (the output layer's bias
    split by vocabulary like its weight)."""
    blocks = dict(FAMILY_BLOCKS[family], num_layers=4)
    whole = single_process(corpus, tmp_path / "one", 6, **blocks)
    split = distributed(corpus, tmp_path / "tp-pp", 4, 6, **blocks, **TP, **PP, **SP)
    assert_same_curve(split[0], whole[0])
    assert_same_curve(split[1], whole[1])


def test_tensor_and_pipeline_checkpoints_reshard_at_load(corpus, tmp_path):
    whole, _ = single_process(corpus, tmp_path / "whole", 8)
    # TP=2 for 4 iterations, then one process; PP=2 for 4, then one process.
    for name, settings in (("tp", TP | SP), ("pp", PP)):
        first, _ = distributed(corpus, tmp_path / name, 2, 8, **settings, exit_interval=4)
        second, _ = single_process(corpus, tmp_path / name, 8, load=tmp_path / name)
        assert_same_curve({**first, **second}, whole)
    # One process for 4 iterations, then TP=2 x PP=2.
    Trainer(parallel_config(corpus, train_iters=8, save=tmp_path / "one", exit_interval=4)).train()
    resumed, _ = distributed(corpus, tmp_path / "one", 4, 8, **TP, **PP, load=tmp_path / "one")
    assert_same_curve(resumed, whole)


def test_checkpoints_load_into_other_layouts(corpus, tmp_path):
    whole, _ = single_process(corpus, tmp_path / "whole", 8)

    # Sharded optimizer on 2 processes for 4 iterations, then one process for the other 4.
    first, _ = distributed(corpus, tmp_path / "a", 2, 8, use_distributed_optimizer=True, save_interval=4, exit_interval=4)
    assert sorted(first) == [1, 2, 3, 4]
    second, _ = single_process(corpus, tmp_path / "a", 8, load=tmp_path / "a")
    assert_same_curve({**first, **second}, whole)

    # One process (single-file format) for 4 iterations, then 2 data-parallel processes.
    Trainer(parallel_config(corpus, train_iters=8, save=tmp_path / "b", exit_interval=4)).train()
    assert (tmp_path / "b" / "iter_0000004" / "mp_rank_00" / "model_optim_rng.pt").exists()
    resumed, _ = distributed(corpus, tmp_path / "b", 2, 8, load=tmp_path / "b")
    assert_same_curve(resumed, whole)

    # Evaluation and export read the sharded checkpoint in one process.
    model, ckpt = load_model(tmp_path / "b")
    assert ckpt.format == "torch_dist" and ckpt.meta["iteration"] == 8
    r = run_cli("export", "hf", "--load", str(tmp_path / "b"), "--output", str(tmp_path / "hf"))
    assert r.returncode == 0, r.stderr
    from transformers import AutoModelForCausalLM

    tokens = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        hf_logits = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")(tokens).logits
        assert (hf_logits - model(tokens)[..., :512]).abs().max().item() < 1e-4


def test_a_layout_that_does_not_divide_is_refused_before_launch(corpus):
    r = run_cli("train", "--nproc-per-node", "3", *parallel_config(corpus, train_iters=2).to_argv())
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "textmill: error: --global-batch-size 8 is not divisible by --micro-batch-size 2 x data-parallel size 3"]
    r = run_cli("train", "--nproc-per-node", "3", *parallel_config(corpus, train_iters=2, tensor_model_parallel_size=3).to_argv())
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "textmill: error: --num-attention-heads 4 is not divisible by --tensor-model-parallel-size 3"]
    r = run_cli("train", "--nproc-per-node", "2", *parallel_config(corpus, train_iters=2, pipeline_model_parallel_size=2,
                                                           micro_batch_size=8).to_argv())
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "textmill: error: --pipeline-model-parallel-size 2 needs at least 2 micro-batches per step; --global-batch-size 8 / "
        "(--micro-batch-size 8 x data-parallel size 1) gives 1"]


def test_checkpoint_convert_writes_a_layout_and_back(corpus, tmp_path):
    Trainer(parallel_config(corpus, train_iters=8, save=tmp_path / "one", exit_interval=4)).train()
    r = run_cli("checkpoint", "convert", "--load", str(tmp_path / "one"), "--save", str(tmp_path / "tp2pp2"),
                "--target-tensor-parallel-size", "2", "--target-pipeline-parallel-size", "2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sum(line.startswith("checkpoint convert: ") for line in r.stdout.splitlines()) == 1
    converted = tmp_path / "tp2pp2" / "iter_0000004"
    assert len(list(converted.glob("__*_0.distcp"))) == 4  # one shard file per rank of the layout
    assert json.loads((converted / "textmill.json").read_text())["parallel"]["tp"] == 2
    r = run_cli("checkpoint", "convert", "--load", str(tmp_path / "tp2pp2"), "--save", str(tmp_path / "back"),
                "--ckpt-format", "torch")
    assert r.returncode == 0, r.stderr
    original, _ = load_model(tmp_path / "one")
    back, ckpt = load_model(tmp_path / "back")
    assert ckpt.format == "torch" and ckpt.meta["iteration"] == 4
    for (name, a), (_, b) in zip(original.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    # Training goes on from the converted weights (with a fresh optimizer, as it says).
    r = run_cli("train", *parallel_config(corpus, train_iters=6, load=tmp_path / "tp2pp2", save=tmp_path / "tp2pp2").to_argv())
    assert r.returncode == 0, r.stderr
    assert "holds weights only (converted); starting a fresh optimizer" in r.stdout
    assert "iteration        5/6" in r.stdout


def build_growth(corpus, tmp_path, nproc, **settings) -> list[dict]:
    """Each rank's host-memory peak growth while its Trainer is built (tests/support/build_memory.py)."""
    import subprocess
    import sys
    from pathlib import Path

    config = parallel_config(corpus, train_iters=1, num_layers=80, hidden_size=512, num_attention_heads=8, **settings)
    settings_file = config.write(tmp_path / f"build-{nproc}-{len(settings)}.json")
    script = str(Path(__file__).parents[1] / "support" / "build_memory.py")
    results = tmp_path / f"growth-{nproc}-{len(settings)}"
    results.mkdir()
    command = [sys.executable, script, str(settings_file), str(results)]
    if nproc > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), *command[1:]]
    r = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return [json.loads(p.read_text()) for p in sorted(results.glob("rank-*.json"))]


@pytest.mark.parametrize("layout", [dict(tensor_model_parallel_size=2), dict(use_distributed_optimizer=True)],
                         ids=["tp2", "fsdp2"])
def test_each_rank_builds_only_its_share_of_the_model(corpus, tmp_path, layout):
    """The model is built on the meta device and each rank allocates only its shards: with the weights
    split over 2 processes, a rank's memory grows by about half the model's bytes while it is built (whole
    on every rank, then sharded, it grew by more than the whole)."""
    [single] = build_growth(corpus, tmp_path, 1)
    model_bytes = 4 * single["parameters"]
    assert single["growth"] >= 0.9 * model_bytes, single
    ranks = build_growth(corpus, tmp_path, 2, **layout)
    assert len(ranks) == 2
    for rank in ranks:
        assert rank["growth"] < 0.75 * model_bytes, (rank, model_bytes)


def test_checkpoints_written_in_the_background_resume_the_straight_curve(corpus, reference, tmp_path):
    """--async-save: each rank copies its tensors to host memory and trains on while a thread writes them;
    a run stopped at iteration 3 and resumed from that checkpoint continues the straight run's curve, and
    the tracker names only checkpoints every rank finished (no hidden folder is left)."""
    save = tmp_path / "ckpt"
    first, _ = distributed(corpus, save, 2, 6, async_save=True, save_interval=2, exit_interval=3)
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "3\n"
    second, _ = distributed(corpus, save, 2, 6, async_save=True, load=save)
    assert_same_curve({**first, **second}, reference[0])
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "6\n"
    assert sorted(p.name for p in save.iterdir() if p.name.startswith("iter_")) == \
        ["iter_0000002", "iter_0000003", "iter_0000006"]
    assert not [p for p in save.iterdir() if p.name.startswith(".")]


def test_async_save_needs_sharded_checkpoints(corpus, tmp_path):
    options = parallel_config(corpus, train_iters=2, save=tmp_path / "ckpt", ckpt_format="torch").to_argv()
    r = run_cli("train", *options, "--async-save")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == ("textmill: error: --async-save writes torch_dist shards; "
                                                 "--ckpt-format torch is one synchronous file")
