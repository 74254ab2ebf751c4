"""The Luigi graph: a tiny run end to end, reruns that redo only what changed or failed."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from textmill import synthweb
from textmill.demo import cloze_passages
from textmill.tokenizers.indexed import IndexedDataset
from textmill.workflows.runner import run_workflow
from textmill.workflows.tasks import MergeDataset, ScrapeShard

from conftest import run_cli

CONFIG = """
[run]
work_dir = "{work}"
urls = ["urls"]
[scrape]
timeout_s = 1.0
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

STAGES = ["1-blacklist", "2-scrape", "3-minhash", "3-dedup", "4-clean", "5-shuffle", "6-decontaminate", "7-tokenizer",
          "8-tokenize", "9-dataset"]


EVAL_PASSAGES = cloze_passages(5, 3)


@pytest.fixture(scope="module")
def site():
    web = synthweb.build_web(seed=7, articles=40, near_duplicates=4, foreign=3, mojibake=2, short=2, planted=tuple(EVAL_PASSAGES))
    with synthweb.serve(web) as server:
        yield web, server


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


def folders(work: Path) -> dict[str, set[str]]:
    return {s: {p.name for p in (work / s).iterdir() if p.is_dir()} if (work / s).exists() else set() for s in STAGES}


def dataset_bytes(config: Path) -> bytes:
    prefix = MergeDataset(str(config)).dataset()
    return Path(f"{prefix}.bin").read_bytes() + Path(f"{prefix}.idx").read_bytes()


def test_the_command_builds_the_corpus_and_a_rerun_does_nothing(tmp_path, site):
    config = make_run(tmp_path, site)
    r = run_cli("run", str(config), "--workers", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "textmill run: done:" in r.stdout
    dataset = IndexedDataset(MergeDataset(str(config)).dataset())
    assert dataset.num_documents > 20
    [decontaminated] = (tmp_path / "work" / "6-decontaminate").glob("*/task.json")
    assert json.loads(decontaminated.read_text())["documents_touched"] >= 1
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "work").rglob("*")}
    again = run_cli("run", str(config))
    assert again.returncode == 0 and "textmill run: done:" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "work").rglob("*")} == before

    bad = run_cli("run", str(tmp_path / "nope.toml"))
    assert bad.returncode == 2 and bad.stderr.startswith("textmill: error:") and len(bad.stderr.splitlines()) == 1
    (tmp_path / "typo.toml").write_text("[clean]\nmin_token = 3\n")
    bad = run_cli("run", str(tmp_path / "typo.toml"))
    assert bad.returncode == 2 and "[clean] has no field 'min_token'" in bad.stderr


def test_a_changed_setting_reruns_its_stage_and_everything_after_it_only(tmp_path, site):
    config = make_run(tmp_path, site)
    assert run_workflow(config)[0]
    first = folders(tmp_path / "work")
    assert all(first[s] for s in STAGES)

    write_config(tmp_path, work="work", min_tokens=64, vocab_size=600, train="false", train_iters=20)  # a cleanup setting
    assert run_workflow(config)[0]
    second = folders(tmp_path / "work")
    for stage in STAGES:
        new = second[stage] - first[stage]
        assert bool(new) == (stage >= "4-clean"), stage

    write_config(tmp_path, work="work", min_tokens=64, vocab_size=700, train="false", train_iters=20)  # the tokenizer
    assert run_workflow(config)[0]
    third = folders(tmp_path / "work")
    for stage in STAGES:
        assert bool(third[stage] - second[stage]) == (stage >= "7-tokenizer"), stage


@pytest.mark.slow
def test_a_failed_and_a_killed_shard_are_redone_alone_and_give_the_same_bytes(tmp_path, site):
    clean = make_run(tmp_path / "clean", site)
    assert run_workflow(clean)[0]

    config = make_run(tmp_path / "broken", site)
    # A failure in scrape shard 1: something in the way of its output (a folder where the file goes).
    blocked = ScrapeShard(str(config), 1).shard_file()
    blocked.mkdir(parents=True)
    (blocked / "in-the-way").write_text("x")
    # A kill in the middle of scrape shard 2: as soon as it has fetched a page.
    victim = ScrapeShard(str(config), 2).shard_file()
    journal = victim.with_name(f".{victim.stem}.journal.jsonl")
    proc = subprocess.Popen([sys.executable, "-m", "textmill.cli", "run", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (journal.exists() and journal.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not ScrapeShard(str(config), 2).complete() and not MergeDataset(str(config)).complete()

    ok, summary = run_workflow(config)
    assert not ok and "ScrapeShard" in summary and not MergeDataset(str(config)).complete()
    assert ScrapeShard(str(config), 2).complete() and not ScrapeShard(str(config), 1).complete()
    [failure] = (tmp_path / "broken" / "work" / ".textmill" / "failures").iterdir()
    assert "ScrapeShard" in failure.name and "IsADirectoryError" in failure.read_text()
    status = run_cli("status", str(config))
    assert status.returncode == 0
    assert re.search(r"^failed +ScrapeShard\(shard=1\) +IsADirectoryError", status.stdout, re.M), status.stdout
    assert re.search(r"^pending +MergeDataset\(\)", status.stdout, re.M) and "1 failed" in status.stdout
    shutil.rmtree(blocked)

    done_before = {t: ScrapeShard(str(config), t).done_file().stat().st_mtime_ns for t in (0, 2)}
    ok, summary = run_workflow(config)
    assert ok, summary
    for t, stamp in done_before.items():  # finished shards were not redone
        assert ScrapeShard(str(config), t).done_file().stat().st_mtime_ns == stamp
    assert dataset_bytes(config) == dataset_bytes(clean)
    assert not failure.exists()  # the shard's success cleared its failure record


def test_new_url_lists_scrape_only_the_new_shard_and_dedup_against_everything(tmp_path, site):
    config = make_run(tmp_path / "grow", site, files=2)
    assert run_workflow(config)[0]
    first = folders(tmp_path / "grow" / "work")
    signatures = {p: p.stat().st_mtime_ns for p in (tmp_path / "grow" / "work" / "3-minhash").rglob("*.parquet")}

    make_run(tmp_path / "grow", site, files=3)  # the third list file arrives
    assert run_workflow(config)[0]
    second = folders(tmp_path / "grow" / "work")
    for stage in ("1-blacklist", "2-scrape", "3-minhash"):
        assert len(second[stage] - first[stage]) == 1, stage  # the new shard's folder only
    assert {p: p.stat().st_mtime_ns for p in signatures} == signatures  # old signatures reused as they were
    for stage in STAGES[3:]:
        assert second[stage] - first[stage], stage

    # The same corpus as a run that had all three files from the start.
    whole = make_run(tmp_path / "whole", site, files=3)
    assert run_workflow(whole)[0]
    assert dataset_bytes(config) == dataset_bytes(whole)


@pytest.mark.slow
def test_two_workers_on_a_central_luigid_do_each_shard_once(tmp_path, site):
    import socket

    web, server = site
    alone = make_run(tmp_path / "alone", site)
    hits = dict(server.hits)
    assert run_workflow(alone)[0]
    fetched_alone = {k: v - hits.get(k, 0) for k, v in server.hits.items() if v != hits.get(k, 0)}

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "luigid-logs").mkdir()
    luigid = subprocess.Popen([sys.executable, "-c", "from luigi.cmdline import luigid; luigid()", "--address", "127.0.0.1",
                               "--port", str(port), "--state-path", str(tmp_path / "luigid.pickle"),
                               "--logdir", str(tmp_path / "luigid-logs")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert luigid.poll() is None, "luigid exited"
                time.sleep(0.1)
        shared = make_run(tmp_path / "shared", site)
        hits = dict(server.hits)
        url = f"http://127.0.0.1:{port}"
        workers = [subprocess.Popen([sys.executable, "-m", "textmill.cli", "run", str(shared), "--scheduler-url", url],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = [w.communicate(timeout=600) for w in workers]
    finally:
        luigid.terminate()
        luigid.wait(timeout=30)
    assert [w.returncode for w in workers] == [0, 0], [r[1][-2000:] for r in results]
    fetched_shared = {k: v - hits.get(k, 0) for k, v in server.hits.items() if v != hits.get(k, 0)}
    assert fetched_shared == fetched_alone  # every page fetched as often as by one worker: no shard done twice
    assert dataset_bytes(shared) == dataset_bytes(alone)


@pytest.mark.slow
def test_end_to_end_trains_evaluates_exports_and_retrains_alone(tmp_path, site):
    config = make_run(tmp_path, site, train="true")
    r = run_cli("run", str(config))
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"trained 20 iterations, validation loss \d", r.stdout)
    assert re.search(r"eval.jsonl: accuracy [\d.]+% \(\d/3\)", r.stdout)
    assert "Hugging Face gpt2 model ->" in r.stdout
    assert "iteration       20/20" in r.stdout  # the trainer's log, streamed
    corpus = folders(tmp_path / "work")
    [hf] = (tmp_path / "work" / "12-export").glob("*/hf/config.json")

    # Only a training setting changes: the corpus is found complete, the model is trained again.
    write_config(tmp_path, work="work", min_tokens=32, vocab_size=600, train="true", train_iters=30)
    r = run_cli("run", str(config))
    assert r.returncode == 0 and "trained 30 iterations" in r.stdout
    assert {s: v for s, v in folders(tmp_path / "work").items() if s in STAGES} == corpus
    assert len(list((tmp_path / "work" / "10-train").iterdir())) == 2
