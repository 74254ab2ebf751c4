"""`textmill train`, `evaluate lambada` and `serve` on a GPU as a user runs them, and generation there."""

import json
import os
import subprocess
import sys

import pytest
import torch

from support.files import TEST_DATA
from support.generation import PROMPTS, Local
from support.server import Server


@pytest.fixture(scope="module")
def trained(corpus, device, tmp_path_factory):
    """`torchrun --nproc-per-node 1 -m textmill.cli train ...` on the corpus's token files, bf16 on a GPU (NCCL's
    group of one), fp32 with gloo on a CPU; what it printed and its checkpoint."""
    save = tmp_path_factory.mktemp("train") / "ckpt"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", "-m", "textmill.cli",
               "train", "--data-path", str(corpus["prefix"]), "--vocab-file", str(corpus["vocab"]),
               "--merge-file", str(corpus["merges"]), "--seq-length", "64", "--micro-batch-size", "4",
               "--global-batch-size", "8", "--train-iters", "20", "--lr", "3e-3", "--lr-warmup-iters", "2",
               "--split", "90,10,0", "--log-interval", "10", "--eval-interval", "10", "--eval-iters", "2",
               "--save", str(save), "--no-index-cache"] + (["--bf16"] if device.type == "cuda" else [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", "NCCL_DEBUG": "INFO"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return save, done


def test_train_runs_under_torchrun_with_the_process_group_of_one(trained, device):
    save, done = trained
    assert f"on {device}" in done.stdout and "MFU" in done.stdout, done.stdout
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip() == "20"
    if device.type == "cuda":  # NCCL started, as it does for eight GPUs
        assert "NCCL INFO" in done.stdout + done.stderr, done.stderr[-3000:]
        assert "MFU: no peak known" not in done.stdout, "the GPU's peak is unknown: its MFU is not reported"


def test_lambada_scores_the_checkpoint_on_the_gpu(trained, device, tmp_path):
    save, _ = trained
    output = tmp_path / "lambada.json"
    done = subprocess.run([sys.executable, "-m", "textmill.cli", "evaluate", "lambada", "--load", str(save),
                           "--valid-data", str(TEST_DATA / "lambada_test.jsonl"), "--device", device.type,
                           "--output", str(output)] + (["--bf16"] if device.type == "cuda" else []),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(output.read_text())
    assert result["total"] > 0 and 0.0 <= result["accuracy"] <= 1.0 and result["perplexity"] > 1.0, result


def test_serve_answers_a_megatron_api_request_from_the_gpu(trained, device):
    save, _ = trained
    server = Server(save, "--device", device.type, *(["--bf16"] if device.type == "cuda" else []))
    try:
        status, body = server.request("PUT", "/api", {"prompts": PROMPTS[:2], "tokens_to_generate": 8, "top_k": 1})
    finally:
        code, _, err = server.stop()
    assert status == 200 and len(body["text"]) == 2, body
    pairs = zip(body["text"], PROMPTS[:2], strict=True)
    assert all(text.startswith(prompt) and len(text) > len(prompt) for text, prompt in pairs), body


def test_generation_with_the_key_value_cache_equals_generation_without(trained, device):
    """In fp32 with TF32 off, so the only difference is the cache: the same greedy tokens, the same log-probabilities
    to the rounding of a differently shaped product."""
    save, _ = trained
    local = Local(save)
    local.model.to(device)
    precision = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        runs = [local(PROMPTS, tokens_to_generate=24, top_k=1, logprobs=True, use_cache=cache) for cache in (True, False)]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = precision
    for cached, plain in zip(*runs, strict=True):
        assert cached.tokens == plain.tokens
        assert cached.logprobs == pytest.approx(plain.logprobs, abs=1e-4)


def test_an_ablations_bits_per_byte_are_the_same_on_the_gpu_as_on_the_cpu(trained, device):
    """What `textmill ablate` measures each variant's model by (evaluate/bits_per_byte.py), on LAMBADA's passages:
    the GPU's figure is the CPU's (fp32 on both; the kernels' order of summation aside)."""
    from textmill.evaluate import LAMBADA_PASSAGES
    from textmill.evaluate.bits_per_byte import evaluate_bits_per_byte

    save, _ = trained
    [on_device] = evaluate_bits_per_byte(save, [LAMBADA_PASSAGES], device=device.type, batch_size=16)
    [on_cpu] = evaluate_bits_per_byte(save, [LAMBADA_PASSAGES], device="cpu", batch_size=16)
    assert on_device["tokens"] == on_cpu["tokens"] and on_device["bytes"] == on_cpu["bytes"]
    assert on_device["bits_per_byte"] == pytest.approx(on_cpu["bits_per_byte"], rel=1e-4)
