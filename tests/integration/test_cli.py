"""The `textmill` command as a user runs it: a missing input, a stage killed mid-write, the demo's whole chain,
and `--help` without heavy imports."""

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.cli import run_cli
from support.files import TEST_DATA, write_jsonl
from textmill.demo import synthweb
from textmill.pipeline.shards import list_shards


def test_missing_input_is_one_error_line(tmp_path):
    for command in ("clean", "dedup", "shuffle"):
        extra = ["--num-shards", "2"] if command == "shuffle" else []
        r = run_cli(command, str(tmp_path / "nope"), "-o", str(tmp_path / "out"), *extra)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("textmill: error: input not found")


def test_killed_stage_leaves_nothing_finished_and_rerun_gives_same_bytes(tmp_path):
    rng = random.Random(3)
    rows = [{"id": f"d{i}", "text": " ".join(synthweb.prose(rng, 2))} for i in range(3000)]
    write_jsonl(tmp_path / "in" / "docs.jsonl", rows)
    args = [sys.executable, "-m", "textmill.cli", "clean", str(tmp_path / "in"), "-o"]

    proc = subprocess.Popen(args + [str(tmp_path / "killed")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    tmp_file = None
    while time.monotonic() < deadline and proc.poll() is None:
        tmp_file = next((p for p in (tmp_path / "killed").glob(".docs.parquet.tmp-*") if p.stat().st_size > 0), None)
        if tmp_file:  # the first row group is on disk: the stage is mid-write
            break
        time.sleep(0.01)
    assert tmp_file is not None and proc.poll() is None, "the stage finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = tmp_path / "killed"
    assert not (killed / "docs.parquet").exists() and not (killed / ".manifests" / "docs.json").exists()

    rerun = run_cli("clean", str(tmp_path / "in"), "-o", str(killed))
    assert rerun.returncode == 0, rerun.stderr
    clean = run_cli("clean", str(tmp_path / "in"), "-o", str(tmp_path / "clean"))
    assert clean.returncode == 0, clean.stderr
    for name in ("docs.parquet", ".rejects/docs.parquet"):
        assert (killed / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()
    assert list_shards([killed]) == [killed / "docs.parquet"]


def test_demo_runs_the_whole_chain(tmp_path):
    import socket

    from textmill.megatron.indexed import IndexedDataset

    with socket.socket() as s:  # a port free now, for both runs (the default may be taken on a shared machine)
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    small = ["--pages", "60", "--num-shards", "2", "--train-iters", "20", "--port", port]
    r = run_cli("demo", "--workdir", str(tmp_path / "demo"), *small, "--lambada", str(TEST_DATA / "lambada_test.jsonl"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    for stage in ("blacklist:", "scrape:", "dedup:", "clean:", "shuffle:", "decontaminate:"):
        assert stage in out
    assert "near_duplicate_of" in out and "language=" in out and "timeout 2" in out
    assert "3 document(s) touched" in out
    documents, dataset = re.search(r"tokenize: ([\d,]+) documents, [\d,]+ tokens -> (\S+)\.bin/\.idx", out).groups()
    assert IndexedDataset(dataset).num_documents == int(documents.replace(",", ""))
    assert re.search(r"train: tiny GPT, 20 iterations on CPU, validation loss [\d.]+", out)
    assert re.search(r"evaluate: cloze set \(held-out generated text\): strict last-word accuracy [\d.]+% \(\d+/100\)", out)
    assert re.search(r"evaluate: lambada_test.jsonl: strict last-word accuracy [\d.]+% \(\d+/5153\)", out)
    assert "export: Hugging Face gpt2 model ->" in out
    report = (tmp_path / "demo" / "work" / "report.html").read_text()
    assert "lambada_test</td><td>" in report and report.count("data:image/png;base64,") == 6
    sample = out.split("a sample (top-p 0.9, seed 1):\n")[1].splitlines()[0]
    assert sample.startswith("The old sailor") and len(sample) > len("The old sailor") + 20
    # The run is a plain `textmill run` config: again, it finds everything done.
    again = run_cli("run", str(tmp_path / "demo" / "run.toml"))
    assert again.returncode == 0 and "textmill run: done:" in again.stdout

    # The same command elsewhere: the same corpus and model (the web is served at the same port).
    r2 = run_cli("demo", "--workdir", str(tmp_path / "demo2"), *small)
    assert r2.returncode == 0, r2.stderr[-3000:]
    dataset2 = re.search(r"tokenize: [\d,]+ documents, [\d,]+ tokens -> (\S+)\.bin/\.idx", r2.stdout).group(1)
    assert Path(f"{dataset2}.bin").read_bytes() == Path(f"{dataset}.bin").read_bytes()
    loss = re.compile(r"validation loss [\d.]+")
    assert loss.search(r2.stdout).group() == loss.search(out).group()


def test_building_the_command_line_imports_no_heavy_library():
    """`textmill --help` answers at once: the parsers are built without torch, matplotlib or transformers (each
    command imports what it needs when it runs)."""
    heavy = ("torch", "matplotlib", "transformers")
    code = ("import sys, textmill.cli as cli\ncli.build_parser()\n"
            f"print(' '.join(m for m in {heavy!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


@pytest.mark.parametrize("argv", [
    ["evaluate", "lambada", "--load", "{ckpt}", "--valid-data", "{ckpt}/lambada.jsonl"],
    ["export", "hf", "--load", "{ckpt}", "--output", "{ckpt}/hf"],
    ["serve", "--load", "{ckpt}"],
    ["generate", "--load", "{ckpt}", "--prompt", "The"],
])
def test_a_checkpoint_without_its_tokenizer_is_told_before_torch_is_imported(tmp_path, argv):
    """A command that loads a model checks the checkpoint and its tokenizer first: the error line comes without
    importing torch (which takes minutes on a busy machine)."""
    ckpt = tmp_path / "ckpt"
    (ckpt / "iter_0000001").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("1\n")
    (ckpt / "iter_0000001" / "textmill.json").write_text('{"vocab_size": 50257}')
    code = ("import sys\nfrom textmill.cli import main\n"
            f"status = main({[a.format(ckpt=ckpt) for a in argv]!r})\n"
            "print(status, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["2", "False"], r.stderr
    assert r.stderr.strip() == (f"textmill: error: {ckpt}/tokenizer/ holds no vocab.json + merges.txt (nor "
                                "tokenizer.json); give --vocab-file and --merge-file")
