"""benchmarks/gpu_check.sh rehearsed on this machine, as it will run on a GPU machine's first minutes: one command,
every file it promises, its exit status (without a GPU the lane runs on the CPU, skipping what needs CUDA)."""

import os
import subprocess
import sys
from xml.etree import ElementTree

import pytest
import torch

from support.files import REPOSITORY


def test_the_quick_gpu_check_runs_end_to_end(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: run benchmarks/gpu_check.sh itself")
    out = tmp_path / "out"
    # The deadlines are the GPU machine's budget, not what is rehearsed: on a busy CPU the lane took longer than
    # its 150 s (the files and the exit status are what this test checks).
    done = subprocess.run(["bash", str(REPOSITORY / "benchmarks" / "gpu_check.sh"), "--quick", str(out)],
                          capture_output=True, text=True, timeout=1500, cwd=tmp_path,
                          env={**os.environ, "PYTHON": sys.executable, "GPU_CHECK_LANE_S": "600",
                               "GPU_CHECK_BENCH_S": "600"})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["bench.md", "environment.txt", "gpu-lane.log", "gpu-lane.xml"]
    suite = ElementTree.parse(out / "gpu-lane.xml").getroot().find("testsuite")
    assert int(suite.get("tests")) >= 10 and suite.get("failures") == suite.get("errors") == "0"
    assert int(suite.get("tests")) > int(suite.get("skipped")) > 0
    assert "needs CUDA (no CUDA device" in (out / "gpu-lane.log").read_text()  # what the CPU cannot answer is skipped, saying why
    bench = (out / "bench.md").read_text()
    assert "| textmill |" in bench and "| transformers |" in bench
    assert "GPU lane passed" in done.stdout and "benchmark passed" in done.stdout
