"""The seed's flow with a Megatron-LM checkpoint, through the commands users run: a release folder shaped as
NVIDIA's GPT-2 345M (fp16, checkpoint version 0, no args; small and random here) is imported, fine-tuned a few
iterations with tensor parallelism over 2 gloo processes, evaluated on LAMBADA and exported to Hugging Face,
whose model then computes textmill's logits, and to Megatron-LM (torch_dist, the default; 2 tensor-parallel
shards; legacy names), each of which imports back to the same logits."""

import json
import random

import pytest
import torch

from support.cli import run_cli
from support.files import MERGES, TEST_DATA, VOCAB, write_jsonl
from support.megatron_files import write_megatron, write_megatron_dist
from textmill.demo import synthweb
from textmill.trainer.checkpoint import load_model

transformers = pytest.importorskip("transformers")
GPT2_FILES = ("--vocab-file", str(VOCAB), "--merge-file", str(MERGES))


def test_a_megatron_release_is_imported_fine_tuned_in_parallel_evaluated_and_exported(tmp_path):
    torch.manual_seed(0)
    hf_model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128))
    write_megatron(tmp_path / "megatron_lm_345m", hf_model, version=0, with_args=False, release=True, dtype=torch.float16)

    r = run_cli("import", "megatron", str(tmp_path / "megatron_lm_345m"), "--save", str(tmp_path / "imported"),
                *GPT2_FILES, "--num-attention-heads", "4")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("import megatron: GPT-2 model, ") and "checkpoint version 0, 1 x 1 shards, no args" in r.stdout

    rng = random.Random(0)
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"text": "\n\n".join(synthweb.prose(rng, 3))} for _ in range(200)])
    r = run_cli("tokenize", "--input", str(docs), "--output-prefix", str(tmp_path / "owt"), *GPT2_FILES, "--append-eod")
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_cli("train", "--nproc-per-node", "2", "--tensor-model-parallel-size", "2", "--load", str(tmp_path / "imported"),
                "--finetune", "--use-checkpoint-args", "--data-path", str(tmp_path / "owt_text_document"), *GPT2_FILES,
                "--seq-length", "64", "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "3",
                "--lr", "1e-4", "--eval-iters", "1", "--eval-interval", "3", "--save", str(tmp_path / "tuned"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "train: 3 iterations" in r.stdout

    lambada = tmp_path / "lambada.jsonl"
    lambada.write_text("".join((TEST_DATA / "lambada_test.jsonl").read_text().splitlines(keepends=True)[:8]))
    r = run_cli("evaluate", "lambada", "--load", str(tmp_path / "tuned"), "--valid-data", str(lambada))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "tuned" / "lambada.json").read_text())["total"] == 8

    r = run_cli("export", "hf", "--load", str(tmp_path / "tuned"), "--output", str(tmp_path / "hf"))
    assert r.returncode == 0, r.stderr[-2000:]
    exported = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ours, _ = load_model(tmp_path / "tuned")
    tokens = torch.randint(0, 50257, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (exported(tokens).logits - ours(tokens)[..., :50257]).abs().max().item() < 1e-4

    r = run_cli("export", "megatron", "--load", str(tmp_path / "tuned"), "--output", str(tmp_path / "to-megatron"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("export megatron: ") and "torch_dist (whole: any tensor x pipeline layout" in r.stdout
    assert (tmp_path / "to-megatron" / "latest_checkpointed_iteration.txt").read_text() == "3"
    split = run_cli("export", "megatron", "--load", str(tmp_path / "tuned"), "--output", str(tmp_path / "split"),
                    "--ckpt-format", "torch", "--target-tensor-parallel-size", "2")
    assert split.returncode == 0 and "2 x 1 shards (tensor x pipeline), Megatron-core names" in split.stdout, split.stderr
    legacy = run_cli("export", "megatron", "--load", str(tmp_path / "tuned"), "--output", str(tmp_path / "legacy"),
                     "--ckpt-format", "torch", "--legacy-names")
    assert legacy.returncode == 0 and "legacy names" in legacy.stdout, legacy.stderr[-2000:]
    refused = run_cli("export", "megatron", "--load", str(tmp_path / "tuned"), "--output", str(tmp_path / "no"),
                      "--legacy-names")
    assert refused.returncode != 0 and "are for --ckpt-format torch" in refused.stderr
    for exported in ("to-megatron", "split", "legacy"):
        r = run_cli("import", "megatron", str(tmp_path / exported), "--save", str(tmp_path / f"back-{exported}"),
                    *GPT2_FILES)
        assert r.returncode == 0, r.stderr[-2000:]
        back, _ = load_model(tmp_path / f"back-{exported}")
        with torch.no_grad():
            assert (back(tokens)[..., :50257] - ours(tokens)[..., :50257]).abs().max().item() < 1e-5


def test_a_torch_dist_checkpoint_saved_by_four_ranks_imports_whole(tmp_path):
    """Megatron-LM's default format as Megatron-core writes it from TP=2 x PP=2 gloo processes: `textmill
    import megatron` reads the whole model, each tensor equal to the ranks' parts put together."""
    whole = write_megatron_dist(tmp_path / "megatron", tp=2, pp=2)
    r = run_cli("import", "megatron", str(tmp_path / "megatron"), "--save", str(tmp_path / "imported"), *GPT2_FILES)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "checkpoint version 3, torch_dist (saved by 2 x 2), vocabulary 50257 padded to 50304" in r.stdout
    ours = load_model(tmp_path / "imported")[0].state_dict()
    assert sorted(ours) == sorted(whole)
    for name, tensor in whole.items():
        assert torch.equal(ours[name], tensor.float()), name
