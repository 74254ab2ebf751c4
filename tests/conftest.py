import json
import os
import random
import sys
from pathlib import Path

import pytest

from textmill.demo import synthweb
from textmill.demo.run import cloze_passages

TEST_DATA = Path(__file__).resolve().parent / "data"  # real files, committed: see data/SOURCES.md


@pytest.fixture(scope="session")
def small_web():
    return synthweb.build_web(seed=7, articles=30, near_duplicates=4, foreign=3, mojibake=2, short=2)


# The evaluation passages the run tests plant in their web, which decontamination cuts out.
EVAL_PASSAGES = cloze_passages(5, 3)


@pytest.fixture(scope="module")
def site():
    """A synthetic web for `textmill run` tests, served on 127.0.0.1 for a test module."""
    web = synthweb.build_web(seed=7, articles=40, near_duplicates=4, foreign=3, mojibake=2, short=2, planted=tuple(EVAL_PASSAGES))
    with synthweb.serve(web) as server:
        yield web, server


@pytest.fixture()
def server(small_web):
    with synthweb.serve(small_web) as srv:
        yield srv


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_cli(*args: str, cwd: Path | None = None):
    """Run the real `textmill` entry point in a subprocess (the way a user does)."""
    import subprocess

    return subprocess.run(
        [sys.executable, "-m", "textmill.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=600,
    )


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """Generated English prose, a 512-token BPE trained on it, tokenized with --append-eod."""
    from textmill.tokenizers.preprocess import TokenizeConfig, dataset_prefix, tokenize_files
    from textmill.tokenizers.train import train_bpe

    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    docs = write_jsonl(root / "docs.jsonl", [{"text": "\n\n".join(synthweb.prose(rng, 3))} for _ in range(400)])
    texts = [json.loads(line)["text"] for line in docs.read_text().splitlines()]
    tok = train_bpe(iter(texts), 512, root / "bpe")
    tokenize_files([docs], root / "owt", tok, TokenizeConfig(append_eod=True), progress=False)
    return {"prefix": dataset_prefix(root / "owt", "text"), "vocab": tok.files[0], "merges": tok.files[1]}


def train_config(corpus, **settings):
    """A small, quick TrainConfig on the corpus; `settings` replace or add to its values."""
    from textmill.trainer.config import TrainConfig

    return TrainConfig(**{**dict(
        data_path=(str(corpus["prefix"]),), vocab_file=Path(corpus["vocab"]), merge_file=Path(corpus["merges"]),
        seq_length=64, micro_batch_size=4, global_batch_size=8, lr=3e-3, lr_warmup_iters=2, log_interval=1,
        eval_interval=5, eval_iters=2, split="90,10,0", no_index_cache=True), **settings})


LLAMA = dict(position_embedding_type="rope", normalization="RMSNorm", swiglu=True, untie_embeddings_and_output_weights=True,
             disable_bias_linear=True)


def train_checkpoint(corpus, save, **settings):
    from textmill.trainer.train import Trainer

    Trainer(train_config(corpus, train_iters=20, eval_interval=20, save=save, **settings)).train()
    return save


@pytest.fixture(scope="session")
def gpt2_ckpt(corpus, tmp_path_factory):
    """A GPT-2 model trained 20 iterations on the corpus (its tokenizer copied into ckpt/tokenizer/)."""
    return train_checkpoint(corpus, tmp_path_factory.mktemp("gpt2") / "ckpt")


@pytest.fixture(scope="session")
def llama_ckpt(corpus, tmp_path_factory):
    return train_checkpoint(corpus, tmp_path_factory.mktemp("llama") / "ckpt", **LLAMA)
