"""Fixtures of both lanes. Expensive ones are built once per test process (session scope); with pytest-xdist,
the tests that use one finished run, or one module's server, are sent to the same process (an xdist group),
so each is built once per pytest run."""

import random
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.cli import run_cli
from support.files import write_jsonl
from support.runs import EVAL_PASSAGES, make_run
from support.training import LLAMA, train_checkpoint
from textmill.demo import synthweb


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    """One xdist group per expensive shared thing: every test of the finished run in one process, and every
    test of a module whose fixture is module-scoped (a server, an S3 endpoint, a reference run) in one."""
    for item in items:
        defs = getattr(item, "_fixtureinfo", None)
        scopes = {d[-1].scope for d in defs.name2fixturedefs.values()} if defs else set()
        if "finished_run" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("finished_run"))
        elif "module" in scopes:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.fixture(scope="session", autouse=True)
def own_cache(tmp_path_factory):
    """TEXTMILL_CACHE in the test's temporary folder, for this process and those it starts: the cuts of
    URL lists and the copies of compressed ones stay out of the user's ~/.cache."""
    import os

    os.environ.setdefault("TEXTMILL_CACHE", str(tmp_path_factory.mktemp("textmill-cache")))


@pytest.fixture(scope="session")
def small_web():
    return synthweb.build_web(seed=7, articles=30, near_duplicates=4, foreign=3, mojibake=2, short=2)


@pytest.fixture(scope="session")
def site():
    """A synthetic web for `textmill run` tests, served on 127.0.0.1 for the whole test process (the finished
    run's URL lists name its port)."""
    web = synthweb.build_web(seed=7, articles=40, near_duplicates=4, foreign=3, mojibake=2, short=2, planted=tuple(EVAL_PASSAGES))
    with synthweb.serve(web) as server:
        yield web, server


@pytest.fixture()
def server(small_web):
    with synthweb.serve(small_web) as srv:
        yield srv


@dataclass
class FinishedRun:
    root: Path  # run.toml, urls/, eval.jsonl and work/: copy it with support.runs.copy_run
    output: subprocess.CompletedProcess  # what `textmill run --workers 2` printed
    fetched: dict[str, int]  # how often the run fetched each page of the site


@pytest.fixture(scope="session")
def finished_run(site, tmp_path_factory) -> FinishedRun:
    """`textmill run` of the default run file (three URL lists, no training), finished once per test process;
    tests copy it and change what they test."""
    web, server = site
    root = tmp_path_factory.mktemp("finished-run")
    config = make_run(root, site)
    hits = dict(server.hits)
    output = run_cli("run", str(config), "--workers", "2")
    assert output.returncode == 0, output.stderr[-3000:]
    fetched = {k: v - hits.get(k, 0) for k, v in server.hits.items() if v != hits.get(k, 0)}
    return FinishedRun(root, output, fetched)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """Generated English prose, a 512-token BPE trained on it, tokenized with --append-eod."""
    import json

    from textmill.tokenizers.preprocess import TokenizeConfig, dataset_prefix, tokenize_files
    from textmill.tokenizers.train import train_bpe

    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    docs = write_jsonl(root / "docs.jsonl", [{"text": "\n\n".join(synthweb.prose(rng, 3))} for _ in range(400)])
    texts = [json.loads(line)["text"] for line in docs.read_text().splitlines()]
    tok = train_bpe(iter(texts), 512, root / "bpe")
    tokenize_files([docs], root / "owt", tok, TokenizeConfig(append_eod=True), progress=False)
    return {"prefix": dataset_prefix(root / "owt", "text"), "vocab": tok.files[0], "merges": tok.files[1]}


@pytest.fixture(scope="session")
def gpt2_ckpt(corpus, tmp_path_factory):
    """A GPT-2 model trained 20 iterations on the corpus (its tokenizer copied into ckpt/tokenizer/)."""
    return train_checkpoint(corpus, tmp_path_factory.mktemp("gpt2") / "ckpt")


@pytest.fixture(scope="session")
def llama_ckpt(corpus, tmp_path_factory):
    return train_checkpoint(corpus, tmp_path_factory.mktemp("llama") / "ckpt", **LLAMA)


@pytest.fixture(scope="session")
def gpt2(gpt2_ckpt):
    """The GPT-2 checkpoint loaded in this process, generating as the server does."""
    from support.generation import Local

    return Local(gpt2_ckpt)


@pytest.fixture()
def dist_ckpt(gpt2_ckpt, tmp_path):
    """The 20-iteration GPT-2 checkpoint rewritten in the sharded (torch_dist) format."""
    from textmill.trainer.checkpoint import load_checkpoint, save_checkpoint

    ckpt = load_checkpoint(gpt2_ckpt)
    root = tmp_path / "dist"
    save_checkpoint(root, ckpt.meta["iteration"], ckpt.meta, ckpt.full, "torch_dist")
    shutil.copytree(gpt2_ckpt / "tokenizer", root / "tokenizer")
    assert load_checkpoint(root).format == "torch_dist"
    return root
