"""Run files for `textmill run` tests over the synthetic web, and what a run wrote."""

import contextlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from textmill.demo import synthweb
from textmill.demo.run import cloze_passages

# The evaluation passages the run tests plant in their web, which decontamination cuts out.
EVAL_PASSAGES = cloze_passages(5, 3)

# Scrape retries are off: the web's hanging and dripping pages would be waited on three times in every run
# (retries are tested once, on purpose, in tests/unit/pipeline/test_scrape.py).
CONFIG = """
[run]
work_dir = "{work}"
urls = ["urls"]
[scrape]
timeout_s = 1.0
retries = 0
allow_private_addresses = true
extract_workers = 0
[clean]
min_tokens = {min_tokens}
[shuffle]
num_shards = 2
[decontaminate]
eval_files = ["eval.jsonl"]
[tokenize]
vocab_size = {vocab_size}
[train]
enabled = {train}
model_preset = "tiny"
seq_length = 64
micro_batch_size = 4
global_batch_size = 8
train_iters = {train_iters}
lr = 0.003
lr_warmup_iters = 2
eval_interval = 10
eval_iters = 2
split = "90,10,0"
[evaluate]
lambada = ["eval.jsonl"]
"""

# An [ablation] table for the run file above: the file as it is, and a variant keeping only long documents.
ABLATION = """
[ablation]
seeds = [1, 2]
[ablation.variants.default]
[ablation.variants.long-documents]
clean = { min_tokens = 600 }
"""

STAGES = ["1-blacklist", "1-blacklist-check", "1-blacklist-duplicates", "2-scrape", "3-minhash", "3-dedup", "3-lsh",
          "4-clean", "5-shuffle", "5-shuffle-scatter", "6-decontaminate", "7-tokenizer", "8-tokenize", "9-dataset"]
PER_URL_FILE = ("1-blacklist", "1-blacklist-check", "1-blacklist-duplicates", "2-scrape", "3-minhash", "3-lsh")


def make_run(root: Path, site, work="work", min_tokens=32, vocab_size=600, files=3, train="false", train_iters=20) -> Path:
    """URL lists split into `files` files under root/urls, and root/run.toml."""
    web, server = site
    urls = synthweb.url_list(web, server)
    (root / "urls").mkdir(parents=True, exist_ok=True)
    size = -(-len(urls) // 3)
    for k in range(files):
        (root / "urls" / f"RS_{k}.txt").write_text("\n".join(urls[k * size : (k + 1) * size]) + "\n")
    # The evaluation set, planted in the web, which decontamination cuts out.
    (root / "eval.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in EVAL_PASSAGES))
    return write_config(root, work=work, min_tokens=min_tokens, vocab_size=vocab_size, train=train, train_iters=train_iters)


def write_config(root: Path, **values) -> Path:
    path = root / "run.toml"
    path.write_text(CONFIG.format(**values))
    return path


def copy_run(finished: Path, root: Path) -> Path:
    """A copy of a finished run's folder (run file, URL lists, evaluation set, WORK) at root; its run.toml.
    Keys are made from settings and file contents, never from where the folder lies, so the copy is
    finished too, and a changed setting reruns only what it changes."""
    shutil.copytree(finished, root, symlinks=True, dirs_exist_ok=True)
    return root / "run.toml"


def stage_files(work: Path) -> dict[Path, int]:
    """Every file of the stages' folders, with its modification time."""
    return {p: p.stat().st_mtime_ns for s in STAGES for p in (work / s).rglob("*")}


def folders(work: Path) -> dict[str, set[str]]:
    return {s: {p.name for p in (work / s).iterdir() if p.is_dir()} if (work / s).exists() else set() for s in STAGES}


def dataset_bytes(config: Path) -> bytes:
    from textmill.workflows import MergeDataset

    prefix = MergeDataset(str(config)).output().prefix
    return Path(f"{prefix}.bin").read_bytes() + Path(f"{prefix}.idx").read_bytes()


@contextlib.contextmanager
def central_scheduler(folder: Path):
    """`textmill scheduler` (luigid with textmill's settings) on a free port of 127.0.0.1; yields its URL."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    luigid = subprocess.Popen([sys.executable, "-m", "textmill.cli", "scheduler", "--port", str(port),
                               "--state-path", str(folder / "luigid.pickle"), "--logdir", str(folder / "luigid-logs")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert luigid.poll() is None, "luigid exited"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        luigid.terminate()
        luigid.wait(timeout=30)
