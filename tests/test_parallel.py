"""Parallel training with real torch.distributed processes (gloo on CPU), launched the way users launch
them (`textmill train --nproc-per-node N`, i.e. torchrun): equivalence with one process, and
checkpoints that load into another layout."""

import json

import pytest
import torch

from textmill.trainer.checkpoint import load_model
from textmill.trainer.train import Trainer

from conftest import run_cli, train_args

# No dropout: each rank draws its own dropout masks, so only the dropout-free math can be compared.
COMMON = ("--micro-batch-size", "2", "--global-batch-size", "8", "--hidden-dropout", "0", "--attention-dropout", "0",
          "--eval-interval", "3")


def cli_args(corpus, *extra):
    return ["--data-path", str(corpus["prefix"]), "--vocab-file", str(corpus["vocab"]), "--merge-file", str(corpus["merges"]),
            "--seq-length", "64", "--lr", "3e-3", "--lr-warmup-iters", "2", "--log-interval", "1", "--eval-iters", "2",
            "--split", "90,10,0", *COMMON, *extra]


def logged(save):
    records = [json.loads(line) for line in (save / "metrics.jsonl").read_text().splitlines()]
    return ({r["iteration"]: r["lm_loss"] for r in records if "lm_loss" in r},
            {r["iteration"]: r["valid_loss"] for r in records if "valid_loss" in r})


def single_process(corpus, save, iters, *extra):
    Trainer(train_args(corpus, *COMMON, "--train-iters", str(iters), "--save", str(save), *extra)).train()
    return logged(save)


def distributed(corpus, save, nproc, iters, *extra):
    r = run_cli("train", "--nproc-per-node", str(nproc), *cli_args(corpus, "--train-iters", str(iters), "--save", str(save), *extra))
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


@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True], ids=["ddp", "distributed-optimizer"])
def test_data_parallel_gives_the_single_process_curve(corpus, reference, tmp_path, sharded):
    extra = ["--use-distributed-optimizer"] if sharded else []
    train, valid = distributed(corpus, tmp_path / "ckpt", 2, 6, *extra)
    assert_same_curve(train, reference[0])
    assert_same_curve(valid, reference[1])
    meta = json.loads((tmp_path / "ckpt" / "iter_0000006" / "textmill.json").read_text())
    assert meta["parallel"] == {"world": 2, "dp": 2, "tp": 1, "pp": 1}
    # Each rank wrote its own shard file; nothing was gathered through rank 0.
    assert len(list((tmp_path / "ckpt" / "iter_0000006").glob("__*_0.distcp"))) == 2


@pytest.mark.slow
def test_checkpoints_load_into_other_layouts(corpus, tmp_path):
    whole, _ = single_process(corpus, tmp_path / "whole", 8)

    # Sharded optimizer on 2 processes for 4 iterations, then one process for the other 4.
    first, _ = distributed(corpus, tmp_path / "a", 2, 8, "--use-distributed-optimizer", "--save-interval", "4",
                           "--exit-interval", "4")
    assert sorted(first) == [1, 2, 3, 4]
    second, _ = single_process(corpus, tmp_path / "a", 8, "--load", str(tmp_path / "a"))
    assert_same_curve({**first, **second}, whole)

    # One process (single-file format) for 4 iterations, then 2 data-parallel processes.
    Trainer(train_args(corpus, *COMMON, "--train-iters", "8", "--save", str(tmp_path / "b"), "--exit-interval", "4")).train()
    assert (tmp_path / "b" / "iter_0000004" / "mp_rank_00" / "model_optim_rng.pt").exists()
    resumed, _ = distributed(corpus, tmp_path / "b", 2, 8, "--load", str(tmp_path / "b"))
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
    r = run_cli("train", "--nproc-per-node", "3", *cli_args(corpus, "--train-iters", "2"))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "textmill: error: --global-batch-size 8 is not divisible by --micro-batch-size 2 x data-parallel size 3"]
